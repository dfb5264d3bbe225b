"""Faults: how long ``accelctl launch`` takes to report them, and what checkpoints cost.

- **killed rank**: rank 1 of 2 SIGKILLs itself at a step; seconds from its death to the
  launcher's exit (the report printed);
- **hung rank**: rank 1 of 2 sleeps at a step with ``ACCELCTL_COLLECTIVE_TIMEOUT`` set; seconds
  from the hang to the launcher's exit, and that minus the timeout (the reporting overhead);
- **killed launcher**: the launcher of 2 workers is SIGKILLed; seconds until both are gone;
- **checkpoints**: an MLP's epoch, against writing its checkpoint (what every epoch end adds)
  and reading it (what a resume adds), in this process, medians.

    python -m bench --sections faults
    python -m bench.faults --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

#: The collective timeout the hung-rank case runs with (seconds).
HANG_TIMEOUT_S = 5.0
#: Hang guard for one launch.
LAUNCH_GUARD_S = 300

SCRIPT = """
import os, signal, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import accelctl

out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ.get("RANK", "0"))
open(os.path.join(out, f"pid{rank}"), "w").write(str(os.getpid()))
if mode == "sleep":
    time.sleep(600)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        if rank == 1 and batch_idx == 3:
            open(os.path.join(out, "fault"), "w").write(repr(time.time()))
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(600)
        x, y = batch
        return nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

x = torch.randn(512, 16)
accelctl.Trainer(max_epochs=1, root_dir=out, enable_checkpointing=False).fit(
    Net(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
)
"""


def _launch(folder: Path, mode: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "accelctl", "launch", "--cpu", "--devices", "2"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    return subprocess.Popen(
        [*command, str(folder / "script.py"), str(folder), mode],
        env={**environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _fault_to_exit(mode: str, env: dict[str, str]) -> dict[str, Any]:
    """One launch whose rank 1 faults: seconds from the fault to the launcher's exit."""
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-faults-") as name:
        folder = Path(name)
        (folder / "script.py").write_text(textwrap.dedent(SCRIPT))
        process = _launch(folder, mode, env)
        _, stderr = process.communicate(timeout=LAUNCH_GUARD_S)
        ended = time.time()
        fault = float((folder / "fault").read_text())
        lines = stderr.decode(errors="replace").strip().splitlines()
        return {
            "seconds": round(ended - fault, 3),
            "exit_code": process.returncode,
            "report": lines[-1] if lines else "",
        }


def _killed_launcher() -> float:
    """SIGKILL a launcher of 2 workers; seconds until both workers are gone."""
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-faults-") as name:
        folder = Path(name)
        (folder / "script.py").write_text(textwrap.dedent(SCRIPT))
        process = _launch(folder, "sleep", {})
        deadline = time.monotonic() + LAUNCH_GUARD_S
        files = [folder / "pid0", folder / "pid1"]
        while not all(f.exists() and f.read_text() for f in files):
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the workers did not start")
            time.sleep(0.05)
        pids = [int(f.read_text()) for f in files]
        started = time.monotonic()
        process.send_signal(signal.SIGKILL)
        process.wait()
        while any(_alive(pid) for pid in pids):
            if time.monotonic() - started > 60:
                for pid in pids:  # do not leave them behind
                    if _alive(pid):
                        os.kill(pid, signal.SIGKILL)
                raise RuntimeError("the workers outlived their launcher by a minute")
            time.sleep(0.005)
        return round(time.monotonic() - started, 4)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _checkpoint_cost(repeats: int, quick: bool) -> dict[str, Any]:
    """Time an epoch without checkpoints against writing and reading the same fit's checkpoint.

    Medians; the write is what every epoch end adds, the read what a resume adds.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import accelctl
    from accelctl._choice.process_environment import ProcessEnvironment
    from accelctl._training.checkpoint import (
        LAST,
        CheckpointConfig,
        Checkpointer,
        LoopState,
        Stateful,
    )

    from .trainer_overhead import _model

    features, hidden, classes = 256, 512, 10
    samples = 128 * (8 if quick else 100)
    epochs = 2
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    y = torch.randint(0, classes, (samples,), generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)

    epoch_times: list[float] = []
    writes: list[float] = []
    reads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-ckpt-") as root:
        for repeat in range(repeats + 1):  # the first is a warm-up
            torch.manual_seed(0)
            model = _model(features, hidden, classes)
            trainer = accelctl.Trainer(
                accelerator="cpu",
                devices=1,
                max_epochs=epochs,
                root_dir=root,
                enable_progress_bar=False,
                enable_checkpointing=False,
            )
            started = time.perf_counter()
            trainer.fit(model, loader)
            elapsed = (time.perf_counter() - started) / epochs
            # The fit's own checkpoint, as its epoch end writes it and a resume reads it; a
            # zero step gives the optimizer its momentum buffers, as the fit's optimizer has.
            optimizer = model.configure_optimizers()
            for parameter in model.parameters():
                parameter.grad = torch.zeros_like(parameter)
            optimizer.step()
            checkpointer = Checkpointer(
                CheckpointConfig(),
                Path(root) / "checkpoints",
                Stateful(model, optimizer),
                env=ProcessEnvironment(),  # alone
                device=torch.device("cpu"),
                run="bench",
            )
            loop = LoopState(epochs, 0, trainer.global_step, None, trainer.metrics)
            started = time.perf_counter()
            checkpointer.save(loop, epoch_end=True)
            written = time.perf_counter() - started
            started = time.perf_counter()
            checkpointer.restore(Path(root) / "checkpoints" / LAST)
            read = time.perf_counter() - started
            if repeat:
                epoch_times.append(elapsed)
                writes.append(written)
                reads.append(read)
        size = (Path(root) / "checkpoints" / LAST).stat().st_size
    epoch_s, write_s = statistics.median(epoch_times), statistics.median(writes)
    return {
        "model": f"MLP {features}-{hidden}-{hidden}-{classes}, SGD with momentum",
        "steps_per_epoch": len(loader),
        "checkpoint_mib": round(size / 2**20, 2),
        "epoch_s": round(epoch_s, 4),
        "checkpoint_write_s": round(write_s, 4),
        "checkpoint_read_s": round(statistics.median(reads), 4),
        "overhead_percent": round(100 * write_s / epoch_s, 2),
    }


def run(repeats: int = 3, quick: bool = False) -> dict[str, Any]:
    """Return every figure of the section as plain data (launch cases: at most 3 runs each).

    A quick run, which only checks that the section works, launches the killed-rank case alone: the
    hung rank and the killed launcher are the same launch with another fault, and the supervision
    tests (tests/trainer/test_supervision.py) run both.
    """
    launches = 1 if quick else max(1, min(repeats, 3))
    killed = [_fault_to_exit("kill", {}) for _ in range(launches)]
    figures: dict[str, Any] = {
        "launches_per_case": launches,
        "killed_rank_s": statistics.median(r["seconds"] for r in killed),
        "killed_rank_report": killed[-1]["report"],
        "killed_rank_exit_code": killed[-1]["exit_code"],
    }
    if not quick:
        hang_env = {"ACCELCTL_COLLECTIVE_TIMEOUT": str(HANG_TIMEOUT_S)}
        hung = [_fault_to_exit("hang", hang_env) for _ in range(launches)]
        hang_s = statistics.median(r["seconds"] for r in hung)
        figures |= {
            "hang_timeout_s": HANG_TIMEOUT_S,
            "hung_rank_s": hang_s,
            "hung_rank_beyond_timeout_s": round(hang_s - HANG_TIMEOUT_S, 3),
            "hung_rank_report": hung[-1]["report"],
            "killed_launcher_s": statistics.median(_killed_launcher() for _ in range(launches)),
        }
    figures["checkpoints"] = _checkpoint_cost(max(1, repeats) if not quick else 1, quick)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeats, args.quick), indent=2))


if __name__ == "__main__":
    main()

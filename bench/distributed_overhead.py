"""accelctl's Trainer and HF Accelerate (bridged) against a hand-written torch.distributed loop.

On several processes of one accelerator (2 openreg devices).

One ``accelctl launch`` starts the processes; in them the three loops train a fresh copy of the
same MLP (same seed) on the same data for the same steps, taking turns (the order rotates every
repeat, so drift in the machine hits all three). Every loop runs in the process group the script
made first (the Trainer and Accelerate take an existing group as it is), so the figures are the
loops' own: the hand-written one wraps the model in DDP, shards the data with a
``DistributedSampler`` and steps (zero_grad, forward, backward, step); the Trainer's time
includes its construction, its checkpoint at each epoch's end and its metrics file;
Accelerate's its ``Accelerator`` (a fresh state each time) and ``prepare``. Each loop is timed
by rank 0 from a barrier before it to a barrier after its last loss is read. The figures are the
ratios of the medians, taken in one run, beside the median of each repeat's own ratios and the
ratio of the fastest runs (a machine shared with other work moves single runs a lot: the
collective backend's transport waits on the other process at every step).

    python bench/distributed_overhead.py                      # openreg, 2 processes, 5 repeats
    python bench/distributed_overhead.py --accelerator cpu    # 2 CPU processes over gloo
    python -m bench --sections distributed                    # as a section of the suite
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (the workers are): the repository's bench
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import launched

ROOT = Path(__file__).resolve().parent.parent
LOOPS = ("hand", "trainer", "accelerate")
FEATURES, HIDDEN, CLASSES, BATCH = 64, 256, 10, 64


def _data(quick: bool) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    samples = BATCH * 2 * (2 if quick else 64)  # steps per epoch and process: 2 or 64
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, FEATURES, generator=generator)
    return TensorDataset(x, torch.randint(0, CLASSES, (samples,), generator=generator))


def _fresh() -> Any:
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.trainer_overhead import _model

    torch.manual_seed(0)
    return _model(FEATURES, HIDDEN, CLASSES)


def _hand(dataset: Any, epochs: int, device: Any, root: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    model = _fresh().to(device)
    ddp = DistributedDataParallel(
        model, device_ids=None if device.type == "cpu" else [device.index]
    )
    optimizer = model.configure_optimizers()
    launched.hand_loop(ddp, optimizer, dataset, epochs, batch=BATCH, device=device)


def _trainer(dataset: Any, epochs: int, device: Any, root: str) -> None:
    from torch.utils.data import DataLoader

    import accelctl

    trainer = accelctl.Trainer(max_epochs=epochs, root_dir=root, enable_progress_bar=False)
    trainer.fit(_fresh(), DataLoader(dataset, batch_size=BATCH, shuffle=True))


def _accelerate(dataset: Any, epochs: int, device: Any, root: str) -> float:
    """Returns the seconds its set-up took (the state, the ``Accelerator``, ``prepare``)."""
    from accelerate.state import AcceleratorState, GradientState
    from torch.nn import functional as F
    from torch.utils.data import DataLoader

    from accelctl.integrations.accelerate import Accelerator

    started = time.perf_counter()
    AcceleratorState._reset_state(reset_partial_state=True)  # one state per Accelerator made
    GradientState._reset_state()
    accelerator = Accelerator()
    model = _fresh()
    optimizer = model.configure_optimizers()
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    set_up = time.perf_counter() - started
    loss = None
    for _epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
    if loss is not None:
        float(loss.detach())
    return set_up


def worker(out: Path, repeats: int, quick: bool, names: tuple[str, ...] = LOOPS) -> None:
    """In each process ``accelctl launch`` started, time the loops ``names``; rank 0 writes ``out``.

    One loop alone (``--loops trainer``) is for timing whole processes from outside.
    """
    import torch.distributed as dist

    selection, device = launched.joined_group(set_up_device=True)
    dataset, epochs = _data(quick), 1 if quick else 2
    loops = {"hand": _hand, "trainer": _trainer, "accelerate": _accelerate}
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as root:
        chosen = {name: loops[name] for name in names}
        times, set_ups = launched.timed_in_turns(  # set-ups: Accelerate's
            chosen, repeats, epochs, dataset=dataset, device=device, root=root
        )
    if dist.get_rank() == 0:
        steps = epochs * len(dataset) // (BATCH * dist.get_world_size())
        result = {
            **launched.group_result(selection, steps, times),
            "accelerate_set_up_s": [round(t, 4) for t in set_ups],
        }
        out.write_text(json.dumps(result))
    dist.destroy_process_group()


def run(
    repeats: int = 5, quick: bool = False, accelerator: str = "openreg", devices: int = 2
) -> dict[str, Any]:
    """Start the processes and collect rank 0's times, as plain data for a report.

    ``skipped`` with the reason where the accelerator is not here.
    """
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    try:  # in a fresh interpreter, with torch's backend autoload on (as the processes have it)
        probe = subprocess.run(
            [sys.executable, "-m", "accelctl", "resolve", "--accelerator", accelerator,
             "--devices", str(devices), "--json"],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"skipped": f"accelctl resolve failed: {exc}"}
    if probe.returncode != 0:
        return {
            "skipped": f"{accelerator} x{devices} is not available here: {probe.stderr.strip()}"
        }
    if json.loads(probe.stdout).get("distributed_backend") is None:
        return {"skipped": f"{accelerator} has no distributed backend here"}
    measured = launched.launch_workers(
        __file__,
        accelerator=accelerator,
        devices=devices,
        options=launched.worker_options(repeats, quick),
        env=env,
    )
    medians = {name: statistics.median(values) for name, values in measured["times_s"].items()}
    fastest = {name: min(values) for name, values in measured["times_s"].items()}
    times = measured["times_s"]
    set_up = measured.get("accelerate_set_up_s", [])

    def paired(name: str) -> float:
        ratios = [ours / hand for ours, hand in zip(times[name], times["hand"], strict=True)]
        return round(statistics.median(ratios), 4)

    steps = measured["steps_per_run"]
    return {
        **measured,
        "model": f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, SGD with momentum, batch {BATCH}",
        "repeats": repeats,
        "quick": quick,
        "median_s": {name: round(value, 4) for name, value in medians.items()},
        "ms_per_step": {name: round(1000 * value / steps, 2) for name, value in medians.items()},
        "ratio_trainer": round(medians["trainer"] / medians["hand"], 4),
        "ratio_accelerate": round(medians["accelerate"] / medians["hand"], 4),
        # The medians of each repeat's own ratios (its three loops ran back to back, so a slow
        # spell of the machine hits them alike), and of the fastest runs: cross-checks.
        "ratio_trainer_paired": paired("trainer"),
        "ratio_accelerate_paired": paired("accelerate"),
        "accelerate_set_up_median_s": round(statistics.median(set_up), 4) if set_up else None,
        "ratio_trainer_fastest": round(fastest["trainer"] / fastest["hand"], 4),
        "ratio_accelerate_fastest": round(fastest["accelerate"] / fastest["hand"], 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--accelerator", default="openreg")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--loops", default=",".join(LOOPS), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.repeats, args.quick, tuple(args.loops.split(",")))
        return
    result = run(args.repeats, args.quick, args.accelerator, args.devices)
    if args.json or "skipped" in result:
        print(json.dumps(result, indent=2))
        return
    per_step = result["ms_per_step"]
    print(
        f"{result['accelerator']} on {', '.join(result['devices'])} over {result['backend']}: "
        f"hand-written {per_step['hand']} ms/step, Trainer {per_step['trainer']}, Accelerate "
        f"{per_step['accelerate']} (medians of {result['repeats']}, {result['steps_per_run']} "
        f"steps each)\nTrainer / hand: {result['ratio_trainer']:.3f}x; Accelerate / hand: "
        f"{result['ratio_accelerate']:.3f}x"
    )


if __name__ == "__main__":
    main()

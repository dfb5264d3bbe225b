"""Section ``peers``: one training through every path a user could pick, each against a hand loop.

The same loop written by hand, in the same process, on the same device.

The workload: a small ResNet-like CNN and a small GPT-2 block (``accelctl._kernels.reference``,
the models of the ``kernels`` row), each in float32 and in bfloat16 autocast, AdamW, batches of
:data:`BATCH` of fixed random data (seed 0), a fixed number of steps per process, no shuffling
where the path lets us choose (transformers' ``Trainer`` shuffles with its seed: the same batches,
another order). The paths (:data:`PATHS`): the hand loop; ``accelctl.Trainer``; Lightning's
``Trainer`` on its own CPU accelerator and through the bridge; Accelerate's ``Accelerator``
natively and through the bridge; transformers' ``Trainer`` natively and through the bridge;
DeepSpeed's engine (ZeRO stage 0, a torch optimizer, ``torch_autocast`` for bfloat16) on its CPU
accelerator (``DS_ACCELERATOR=cpu``) and through the bridge. Each on the CPU and on torch_openreg
(the frameworks' own paths have no openreg device: there the bridge is the only way), in 1
process and in 2 (DDP over gloo, over occl).

Each cell (path x device x processes) is one fresh process or launch: ``python peers.py`` for 1
process, ``torchrun --standalone`` for 2 (the hand loop, the frameworks' own paths) or ``accelctl
launch`` (accelctl's Trainer and the bridges). In it, rank 0 measures:

- **start-up to the first step**: from just before the launch (the parent's clock) to the first
  call of the model's ``forward`` in the path's first run: imports, the framework's set-up and
  its first batch;
- **per step, steady state**: each run records the time of every ``forward`` call (every path
  calls the model's own ``forward`` once a step); a run's figure is the mean interval from the
  step after its first :data:`WARM_STEPS` to its last forward. Runs of the path and of the hand
  loop take turns in the same process (the order alternating round by round, a fresh model,
  optimizer and loader each run), and each round gives a ratio path / hand; the figure is the
  median of those ratios with a distribution-free 95% interval (``kernels.ratio_summary``);
- **peak memory per process**: the high-water mark of the process's resident memory
  (``VmHWM``, which an ``exec`` resets), each rank's; the hand loop's own process is the floor.

In every process of several, the process group is made first (gloo on the CPU, occl on
openreg) and every path trains in it, so its set-up is in none of the per-step figures. On
openreg, every process has the CPU fallback on (``ACCELCTL_CPU_FALLBACK=1``, set up before the
first run: openreg has no convolution and no fused attention), the hand loop's included.

    python bench/peers.py --quick                        # every cell, a few steps: runs?
    python bench/peers.py --devices cpu --processes 1 --paths hand,accelctl
    python -m bench --sections peers --output bench/results/peers.json   # the figures
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: name -> (what it is, the distribution it needs or None, kind). Kinds: ``hand`` (the floor),
#: ``accelctl``, ``native`` (a framework on its own devices), ``bridge`` (through accelctl's).
PATHS: dict[str, tuple[str, str | None, str]] = {
    "hand": ("the loop by hand (torch alone)", None, "hand"),
    "accelctl": ("accelctl.Trainer", None, "accelctl"),
    "lightning": ("Lightning Trainer, its own accelerator", "lightning", "native"),
    "lightning-bridge": ("Lightning Trainer through the bridge", "lightning", "bridge"),
    "accelerate": ("Accelerate, its own set-up", "accelerate", "native"),
    "accelerate-bridge": ("Accelerate through the bridge", "accelerate", "bridge"),
    "transformers": ("transformers Trainer, its own set-up", "transformers", "native"),
    "transformers-bridge": ("transformers Trainer through the bridge", "transformers", "bridge"),
    "deepspeed": ("DeepSpeed, DS_ACCELERATOR=cpu", "deepspeed", "native"),
    "deepspeed-bridge": ("DeepSpeed through the bridge", "deepspeed", "bridge"),
}
#: A bridge -> its framework's own path.
NATIVE_OF = {name: name.removesuffix("-bridge") for name in PATHS if name.endswith("-bridge")}
DEVICES = ("cpu", "openreg")
PROCESSES = (1, 2)
#: (model, precision): the model of ``accelctl._kernels.reference``, accelctl's precision names.
WORKLOADS = (("cnn", "32"), ("cnn", "bf16-mixed"), ("gpt", "32"), ("gpt", "bf16-mixed"))
BATCH, CNN_WIDTH, GPT_WIDTH = 32, 16, 64
#: Steps per run and process, the first of which the per-step figure leaves out.
STEPS, WARM_STEPS = 12, 3
QUICK_STEPS, QUICK_WARM_STEPS = 6, 2
#: The cells of the run in progress, rewritten after each (a long run cut short keeps them).
PROGRESS = ROOT / "bench" / "results" / "tmp" / "peers-progress.json"
#: A hang guard per cell (not a speed limit): a launch that never ends is killed, and named.
CELL_TIMEOUT_S = 3600
#: Targets, as ratios measured in the same run (issue 48).
ACCELCTL_TARGET, BRIDGE_TARGET = 1.03, 1.02


def workload_key(model: str, precision: str) -> str:
    """``"cnn 32"``, ``"gpt bf16-mixed"``: a workload's name in the results."""
    return f"{model} {precision}"


# -- in the processes of a cell ---------------------------------------------------------------


class Batches:
    """The fixed data of a workload: ``steps`` batches of :data:`BATCH` per ``world`` process.

    ``{"inputs", "labels"}`` samples, a map-style dataset that every framework takes as it is.
    """

    def __init__(self, model: str, steps: int, world: int) -> None:
        import torch

        from accelctl._kernels.reference import batch

        generator = torch.Generator().manual_seed(0)
        self.inputs, self.labels = batch(model, BATCH * steps * world, generator)

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"inputs": self.inputs[index], "labels": self.labels[index]}


_CLASSES: dict[str, Any] = {}


def _peer_class() -> Any:
    """Return the model every path trains, its loss inside ``forward``, its calls timed.

    A reference net, its loss inside ``forward`` (so that each framework's autocast covers both, as
    transformers' and Accelerate's do), and the time of each ``forward`` call recorded in
    :attr:`stamps`.
    """
    if "peer" in _CLASSES:
        return _CLASSES["peer"]
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Peer(nn.Module):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net
            self.stamps: list[float] = []
            #: The process's CPU time at each call (every thread's, torch's included): on a
            #: machine shared with other work it moves far less than the wall clock.
            self.cpu_stamps: list[float] = []
            self.first_wall: float | None = None

        def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            self.stamps.append(time.perf_counter())
            self.cpu_stamps.append(time.process_time())
            if self.first_wall is None:
                self.first_wall = time.time()
            logits = self.net(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
            return {"loss": loss}

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self(**batch)["loss"]  # accelctl.Trainer's protocol

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3, foreach=True)

    _CLASSES["peer"] = Peer
    return Peer


def fresh_model(model: str) -> Any:
    """A new copy of the workload's model, the same weights every time (seed 0)."""
    import torch

    from accelctl._kernels.reference import small_cnn, small_gpt

    torch.manual_seed(0)
    net = small_cnn(width=CNN_WIDTH) if model == "cnn" else small_gpt(width=GPT_WIDTH)
    return _peer_class()(net)


@dataclass
class Context:
    """What a run needs to know of its process."""

    device: Any  # torch.device
    rank: int
    world: int
    steps: int
    root: str

    @property
    def name(self) -> str:
        """The accelerator's name, as accelctl and the bridges take it."""
        return str(self.device.type)

    def loader(self, data: Batches, sampler: bool = True) -> Any:
        """The plain loader (a ``DistributedSampler`` where ``sampler`` and several processes)."""
        from torch.utils.data import DataLoader, DistributedSampler

        if self.world > 1 and sampler:
            shard = DistributedSampler(data, self.world, self.rank, shuffle=False)
            return DataLoader(data, batch_size=BATCH, sampler=shard)
        return DataLoader(data, batch_size=BATCH, shuffle=False)


def _run_hand(ctx: Context, model: str, precision: str) -> Any:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    peer = fresh_model(model).to(ctx.device)
    stepped = DistributedDataParallel(peer) if ctx.world > 1 else peer
    optimizer = peer.configure_optimizers()
    bf16 = precision == "bf16-mixed"
    loss = None
    for batch in ctx.loader(Batches(model, ctx.steps, ctx.world)):
        inputs, labels = batch["inputs"].to(ctx.device), batch["labels"].to(ctx.device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = stepped(inputs=inputs, labels=labels)["loss"]
        loss.backward()
        optimizer.step()
    if loss is not None:
        float(loss.detach())
    return peer


def _run_accelctl(ctx: Context, model: str, precision: str) -> Any:
    import accelctl

    peer = fresh_model(model)
    trainer = accelctl.Trainer(
        accelerator=ctx.name,
        devices=1 if ctx.world == 1 else "auto",
        max_epochs=1,
        precision=precision,
        root_dir=ctx.root,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(peer, ctx.loader(Batches(model, ctx.steps, ctx.world), sampler=False))
    return peer


def _run_lightning(ctx: Context, model: str, precision: str, bridge: bool) -> Any:
    import lightning

    if "lightning" not in _CLASSES:

        class Lit(lightning.LightningModule):
            def __init__(self, peer: Any) -> None:
                super().__init__()
                self.peer = peer

            def training_step(self, batch: Any, batch_idx: int) -> Any:
                return self.peer(**batch)["loss"]

            def configure_optimizers(self) -> Any:
                return self.peer.configure_optimizers()

        _CLASSES["lightning"] = Lit
    accelerator: Any = ctx.name
    if bridge:
        from accelctl.integrations.lightning import LightningAccelerator

        accelerator = LightningAccelerator(ctx.name)
    peer = fresh_model(model)
    trainer = lightning.Trainer(
        accelerator=accelerator,
        devices=ctx.world,
        strategy="ddp" if ctx.world > 1 else "auto",
        precision="bf16-mixed" if precision == "bf16-mixed" else "32-true",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=ctx.root,
    )
    # Lightning puts its own DistributedSampler in (no shuffling, as the loader's sampler).
    trainer.fit(
        _CLASSES["lightning"](peer), ctx.loader(Batches(model, ctx.steps, ctx.world), False)
    )
    return peer


def _reset_accelerate() -> None:
    """One state per ``Accelerator`` made (Accelerate keeps its state in class attributes)."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def _run_accelerate(ctx: Context, model: str, precision: str, bridge: bool) -> Any:
    _reset_accelerate()
    mixed = "bf16" if precision == "bf16-mixed" else "no"
    if bridge:
        from accelctl.integrations.accelerate import Accelerator

        accelerator = Accelerator(ctx.name, mixed_precision=mixed)
    else:
        import accelerate

        accelerator = accelerate.Accelerator(cpu=True, mixed_precision=mixed)
    peer = fresh_model(model)
    optimizer = peer.configure_optimizers()
    loader = ctx.loader(Batches(model, ctx.steps, ctx.world), sampler=False)
    stepped, optimizer, loader = accelerator.prepare(peer, optimizer, loader)
    loss = None
    for batch in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = stepped(**batch)["loss"]
        accelerator.backward(loss)
        optimizer.step()
    if loss is not None:
        float(loss.detach())
    return peer


def _run_transformers(ctx: Context, model: str, precision: str, bridge: bool) -> Any:
    import transformers

    _reset_accelerate()
    options: dict[str, Any] = {
        "output_dir": ctx.root,
        "per_device_train_batch_size": BATCH,
        "max_steps": ctx.steps,
        "bf16": precision == "bf16-mixed",
        "report_to": "none",
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "max_grad_norm": 0.0,  # no clipping: the other paths do not clip
        "lr_scheduler_type": "constant",
        "seed": 0,
    }
    if bridge:
        from accelctl.integrations.transformers import TrainingArguments

        args: Any = TrainingArguments(accelerator=ctx.name, **options)
    else:
        args = transformers.TrainingArguments(use_cpu=True, **options)
    peer = fresh_model(model)
    trainer = transformers.Trainer(
        model=peer,
        args=args,
        train_dataset=Batches(model, ctx.steps, ctx.world),
        optimizers=(peer.configure_optimizers(), None),
    )
    trainer.train()
    return peer


def _run_deepspeed(ctx: Context, model: str, precision: str, bridge: bool) -> Any:
    if bridge:
        from accelctl.integrations import deepspeed as deepspeed_bridge

        deepspeed_bridge.use_plugin(ctx.name)
    import deepspeed

    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 0},
        "steps_per_print": 10**9,
    }
    if precision == "bf16-mixed":
        config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    peer = fresh_model(model)
    engine, _, _, _ = deepspeed.initialize(
        model=peer, optimizer=peer.configure_optimizers(), config=config
    )
    loss = None
    for batch in ctx.loader(Batches(model, ctx.steps, ctx.world)):
        loss = engine(
            inputs=batch["inputs"].to(engine.device), labels=batch["labels"].to(engine.device)
        )["loss"]
        engine.backward(loss)
        engine.step()
    if loss is not None:
        float(loss.detach())
    engine.destroy()
    return peer


RUNNERS: dict[str, Callable[[Context, str, str], Any]] = {
    "hand": _run_hand,
    "accelctl": _run_accelctl,
    "lightning": lambda c, m, p: _run_lightning(c, m, p, bridge=False),
    "lightning-bridge": lambda c, m, p: _run_lightning(c, m, p, bridge=True),
    "accelerate": lambda c, m, p: _run_accelerate(c, m, p, bridge=False),
    "accelerate-bridge": lambda c, m, p: _run_accelerate(c, m, p, bridge=True),
    "transformers": lambda c, m, p: _run_transformers(c, m, p, bridge=False),
    "transformers-bridge": lambda c, m, p: _run_transformers(c, m, p, bridge=True),
    "deepspeed": lambda c, m, p: _run_deepspeed(c, m, p, bridge=False),
    "deepspeed-bridge": lambda c, m, p: _run_deepspeed(c, m, p, bridge=True),
}


def per_step_s(stamps: Sequence[float], warm: int) -> float:
    """Return the mean interval between ``forward`` calls after the first ``warm``: a step's time.

    The steady state; a framework that runs one more ``forward`` before its steps, to count FLOPs or
    to check the model, shifts the window by one, no more.
    """
    if len(stamps) < warm + 2:
        raise ValueError(f"{len(stamps)} steps recorded; the figure needs more than {warm + 1}")
    return (stamps[-1] - stamps[warm]) / (len(stamps) - 1 - warm)


def peak_rss_mib() -> float:
    """Return this process's resident high-water mark in MiB.

    ``VmHWM`` where there is one: an ``exec`` resets it, unlike ``ru_maxrss``, which a launcher's
    size would inflate; ``ru_maxrss`` elsewhere.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round((rss / 2**20 if sys.platform == "darwin" else rss / 1024), 1)


def worker(spec: dict[str, Any]) -> None:
    """Run one cell's process: the path's first run, then the path and the hand loop in turns.

    The first run is the start-up; then per workload rounds of the two runs; rank 0 writes the
    figures, every rank its peak memory.
    """
    started = float(os.environ["BENCH_PEERS_T0"])
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    path, steps, warm = spec["path"], spec["steps"], spec["warm"]
    if path.startswith("deepspeed") and world == 1:  # DeepSpeed always joins a group
        alone = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
        os.environ.update(alone, MASTER_PORT=str(spec["port"]))
    import torch
    import torch.distributed as dist

    if spec["device"] == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device(spec["device"], local)
        torch.accelerator.set_device_index(local)
        import accelctl
        from accelctl._kernels.setup import set_up_kernels

        set_up_kernels(accelctl.get_accelerator(spec["device"]), device, rank=rank)
    if world > 1:
        dist.init_process_group("gloo" if device.type == "cpu" else "occl")
    own, hand = RUNNERS[path], RUNNERS["hand"]
    workloads: dict[str, dict[str, Any]] = {}
    startup: float | None = None
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-peers-") as root:
        ctx = Context(device, rank, world, steps, root)
        for index, (model, precision) in enumerate(spec["workloads"]):
            key = workload_key(model, precision)
            figures: dict[str, Any] = {"path_ms": [], "hand_ms": [], "path_cpu_ms": [],
                                       "hand_cpu_ms": []}  # fmt: skip
            workloads[key] = figures
            try:
                if index == 0:  # the start-up (and a warm-up)
                    first = own(ctx, model, precision)
                    startup = None if first.first_wall is None else first.first_wall - started
                elif spec["warmup"]:
                    own(ctx, model, precision)
                if spec["warmup"]:  # kernels, caches, the optimizer's first step
                    hand(ctx, model, precision)
                for round_ in range(spec["rounds"]):
                    order = ((own, "path"), (hand, "hand"))
                    for runner, slot in order if round_ % 2 == 0 else order[::-1]:
                        done = runner(ctx, model, precision)
                        wall, cpu = (per_step_s(s, warm) for s in (done.stamps, done.cpu_stamps))
                        figures[f"{slot}_ms"].append(round(1000 * wall, 4))
                        figures[f"{slot}_cpu_ms"].append(round(1000 * cpu, 4))
            except Exception as exc:  # one workload's failure is a row, the others still run
                figures["error"] = f"{type(exc).__name__}: {str(exc).strip()[:600]}"
    out = Path(spec["out"])
    (out.parent / f"rss.{rank}").write_text(str(peak_rss_mib()))
    if world > 1:
        dist.barrier()
    if rank == 0:
        result = {
            "startup_s": None if startup is None else round(startup, 3),
            "workloads": workloads,
        }
        out.write_text(json.dumps(result))
    if world > 1:
        dist.destroy_process_group()


# -- the section -----------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def why_not(path: str, device: str) -> str | None:
    """Why a cell cannot run here (None where it can)."""
    _, needs, kind = PATHS[path]
    if device == "openreg" and importlib.util.find_spec("torch_openreg") is None:
        return "torch_openreg is not installed (the test sessions install it from ../shared)"
    if needs is not None and importlib.util.find_spec(needs) is None:
        return f"{needs} is not installed (pip install 'accelctl[{needs}]'; nox -s bench)"
    if kind == "native" and device != "cpu":
        return f"{needs} has no {device} device of its own: the bridge is its only way there"
    return None


def _env(path: str, device: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if device == "cpu":  # as on a machine without an out-of-tree backend
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    else:
        env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
        env["ACCELCTL_CPU_FALLBACK"] = "1"
    if path == "deepspeed":
        env["DS_ACCELERATOR"] = "cpu"
    # One intra-op thread per process, as torchrun sets for several: the 1- and 2-process cells
    # compare, and no idle thread spins (which the CPU-time figure would count) on a busy machine.
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _command(path: str, device: str, processes: int, spec_file: Path) -> list[str]:
    script = [str(Path(__file__).resolve()), "--worker", str(spec_file)]
    if processes == 1:
        return [sys.executable, *script]
    if PATHS[path][2] in ("accelctl", "bridge"):
        return [sys.executable, "-m", "accelctl", "launch", "--accelerator", device,
                "--devices", str(processes), *script]  # fmt: skip
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(processes), *script]  # fmt: skip


def run_cell(
    path: str, device: str, processes: int, rounds: int, steps: int, warm: int,
    workloads: Sequence[tuple[str, str]] = WORKLOADS, warmup: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """One cell in a fresh process (or launch): its figures, or ``error`` with the stderr's end."""
    cell: dict[str, Any] = {"path": path, "device": device, "processes": processes}
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-peers-") as folder:
        spec_file, out = Path(folder) / "spec.json", Path(folder) / "out.json"
        spec = {"path": path, "device": device, "steps": steps, "warm": warm, "rounds": rounds,
                "workloads": list(workloads), "out": str(out), "port": _free_port(),
                "warmup": warmup}  # fmt: skip
        spec_file.write_text(json.dumps(spec))
        env = _env(path, device)
        env["BENCH_PEERS_T0"] = repr(time.time())
        proc = subprocess.Popen(
            _command(path, device, processes, spec_file), env=env, cwd=folder,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=CELL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            cell["error"] = f"no end after {CELL_TIMEOUT_S} s (killed): {output.strip()[-1500:]}"
            return cell
        if proc.returncode != 0 or not out.is_file():
            cell["error"] = f"exited {proc.returncode}: {output.strip()[-1500:]}"
            return cell
        cell.update(json.loads(out.read_text()))
        cell["peak_rss_mib"] = [float(p.read_text()) for p in sorted(Path(folder).glob("rss.*"))]
    from .kernels import ratio_summary

    for figures in cell["workloads"].values():
        pairs = list(zip(figures["path_ms"], figures["hand_ms"], strict=True))
        if not pairs:
            continue
        figures["path_ms_per_step"] = round(statistics.median(figures["path_ms"]), 3)
        figures["hand_ms_per_step"] = round(statistics.median(figures["hand_ms"]), 3)
        figures["ratio"] = ratio_summary([own / hand for own, hand in pairs])
        cpu = list(zip(figures["path_cpu_ms"], figures["hand_cpu_ms"], strict=True))
        figures["cpu_ratio"] = ratio_summary([own / hand for own, hand in cpu])
    return cell


def _said(cell: dict[str, Any]) -> str:
    """A cell in a line, for the progress of a run."""
    if "error" in cell:
        return f"failed: {cell['error'][-300:]}"
    said = []
    for key, figures in cell["workloads"].items():
        if "error" in figures:
            said.append(f"{key} failed: {figures['error'][:200]}")
        elif "ratio" in figures:
            said.append(f"{key} {figures['ratio']['median']:g}x (CPU "
                        f"{figures['cpu_ratio']['median']:g}x)")  # fmt: skip
    return f"start-up {cell['startup_s']} s; " + "; ".join(said)


def _ratio(cell: dict[str, Any] | None, key: str, kind: str = "ratio") -> float | None:
    if cell is None or "error" in cell:
        return None
    summary = cell.get("workloads", {}).get(key, {}).get(kind)
    return None if summary is None else float(summary["median"])


def targets(cells: Sequence[dict[str, Any]], kind: str = "ratio") -> list[dict[str, Any]]:
    """Judge the section's targets per device and process count, each on its worst workload.

    The workload where it is furthest from its limit, so a target holds on all four or misses,
    naming where; on the wall-clock ratios (``kind="ratio"``) or the CPU-time ones
    (``"cpu_ratio"``).
    """
    from .targets import Target

    found = {(c["path"], c["device"], c["processes"]): c for c in cells}
    rows: list[Target] = []
    keys = [workload_key(m, p) for m, p in WORKLOADS]

    def worst(label: str, limit: float, pairs: Iterable[tuple[str, float | None]]) -> None:
        measured = [(value, key) for key, value in pairs if value is not None]
        if measured:
            value, key = max(measured)
            rows.append(Target(f"{label} (worst: {key})", round(value, 3), limit))

    for device in DEVICES:
        for n in PROCESSES:
            where = f"{device} x{n}"
            ours = found.get(("accelctl", device, n))
            worst(f"accelctl.Trainer / hand <= {ACCELCTL_TARGET}, {where}", ACCELCTL_TARGET,
                  ((k, _ratio(ours, k, kind)) for k in keys))  # fmt: skip
            peer = found.get(("lightning", device, n))

            def against(a: float | None, b: float | None) -> float | None:
                return None if a is None or b is None else a / b

            worst(f"accelctl.Trainer / Lightning Trainer < 1, {where}", 1.0,
                  ((k, against(_ratio(ours, k, kind), _ratio(peer, k, kind)))
                   for k in keys))  # fmt: skip
            for bridge, native in NATIVE_OF.items():
                worst(
                    f"{bridge} / {native} <= {BRIDGE_TARGET}, {where}", BRIDGE_TARGET,
                    ((k, against(_ratio(found.get((bridge, device, n)), k, kind),
                                 _ratio(found.get((native, device, n)), k, kind)))
                     for k in keys),
                )  # fmt: skip
    return [row.to_dict() for row in rows]


def run(
    repeats: int = 5,
    quick: bool = False,
    paths: Sequence[str] = tuple(PATHS),
    devices: Sequence[str] = DEVICES,
    processes: Sequence[int] = PROCESSES,
    steps: int | None = None,
    with_list: bool = True,
) -> dict[str, Any]:
    """Run every cell, one after the other, then ``list --json`` against its floor; plain data.

    The paths take turns within each device and process count; the list is timed by
    :mod:`bench.listcost`, where ``with_list``. ``repeats`` is the rounds of pairs per workload (and
    a third of the list's repeats).
    """
    steps = steps or (QUICK_STEPS if quick else STEPS)
    warm = QUICK_WARM_STEPS if quick else min(WARM_STEPS, max(1, steps // 4))
    rounds = 1 if quick else repeats
    cells: list[dict[str, Any]] = []
    for device in devices:
        for n in processes:
            for path in paths:
                reason = why_not(path, device)
                if reason is not None:
                    cells.append({"path": path, "device": device, "processes": n,
                                  "skipped": reason})  # fmt: skip
                    continue
                began = time.perf_counter()
                cell = run_cell(path, device, n, rounds, steps, warm, warmup=not quick)
                cells.append(cell)
                took = time.perf_counter() - began
                PROGRESS.parent.mkdir(parents=True, exist_ok=True)  # a long run's cells so far
                PROGRESS.write_text(json.dumps({"cells": cells}, indent=1))
                print(f"[bench] peers: {path} on {device} x{n}: {_said(cell)} ({took:.0f} s)",
                      file=sys.stderr, flush=True)  # fmt: skip
    import torch

    from . import listcost

    listing = listcost.run(1 if quick else 3 * repeats, quick) if with_list else None
    return {
        "quick": quick,
        "rounds": rounds,
        "steps_per_run": steps,
        "warm_steps": warm,
        "batch": BATCH,
        "workloads": [workload_key(m, p) for m, p in WORKLOADS],
        "models": {
            "cnn": f"ResNet-like CNN, width {CNN_WIDTH}, batch {BATCH} of 3x16x16",
            "gpt": f"GPT-2 block, width {GPT_WIDTH}, 4 heads, batch {BATCH} of 16 tokens",
        },
        # Each cell's intra-op threads (OMP_NUM_THREADS, 1 unless set: _env).
        "threads_per_process": int(os.environ.get("OMP_NUM_THREADS", "1")),
        "torch": torch.__version__,
        "cells": cells,
        # A quick run's few steps say nothing about the costs: no verdicts.
        "targets": [] if quick else targets(cells),
        "targets_cpu": [] if quick else targets(cells, "cpu_ratio"),
        "list": listing,
    }


def _names(value: str, accepted: Sequence[str], what: str) -> list[str]:
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in accepted]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'} in {value!r}; "
            f"choose from {','.join(accepted)}"
        )
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of pairs per workload")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--paths", type=lambda v: _names(v, list(PATHS), "path"),
                        default=list(PATHS))  # fmt: skip
    parser.add_argument("--devices", type=lambda v: _names(v, DEVICES, "device"),
                        default=list(DEVICES))  # fmt: skip
    parser.add_argument("--processes",
                        type=lambda v: [int(n) for n in _names(v, ("1", "2"), "process count")],
                        default=list(PROCESSES))  # fmt: skip
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--no-list", action="store_true", help="leave list --json's part out")
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(json.loads(args.worker.read_text()))
        return
    result = run(args.repeats, args.quick, args.paths, args.devices, args.processes, args.steps,
                 with_list=not args.no_list)  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a script: `bench` importable for its helpers, and
        # bench/ itself off the path (its kernels.py would shadow the `kernels` transformers
        # imports).
        sys.path[:] = [str(ROOT)] + [
            p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"
        ]
        __package__ = "bench"
    main()

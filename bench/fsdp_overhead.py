"""FSDP2 through accelctl's Trainer against a hand loop, and the bytes held under FSDP2 and DDP.

The Trainer with ``strategy="fsdp"`` against the same loop written by hand with ``fully_shard``, and
the bytes a process holds for its model under each strategy, on 2 processes of one accelerator: 2
CPU processes over gloo, or 2 openreg devices over ``occl`` (PyTorch's out-of-tree test backend,
torch_openreg 0.0.3, installed as the tests install it).

One ``accelctl launch --accelerator A --devices 2`` starts the processes, which make their process
group first (the Trainer uses it as it is, so the figures are the loops' own). Time: the two loops
train a fresh copy of the same MLP (same seed, same data, same steps) taking turns, the order
rotating every repeat; both put ``fully_shard`` on each linear layer and the root (the Trainer
through the model's ``fsdp_modules``); the hand-written one shards the data with a
``DistributedSampler`` and steps (zero_grad, forward, backward, step); the Trainer's time includes
its construction, its sharded checkpoint at each epoch's end and its metrics file. Each loop is
timed by rank 0 from a barrier before it to a barrier after it. Memory: a wider MLP is trained for
one epoch through the Trainer with ``strategy="ddp"`` and ``strategy="fsdp"``; after its last step
each process adds up the storage its parameters, gradients and optimizer states hold (the tensors'
own storages, counted once each: measured on the objects, not computed from the parameter count;
DDP's gradient buckets are not counted).

    python bench/fsdp_overhead.py                          # CPU, 5 repeats
    python bench/fsdp_overhead.py --accelerator openreg    # 2 openreg devices
    python -m bench --sections fsdp,fsdp-openreg           # as sections of the suite
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (the workers are): the repository's bench
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import launched

ROOT = Path(__file__).resolve().parent.parent
LOOPS = ("hand", "trainer")
FEATURES, HIDDEN, CLASSES, BATCH = 64, 256, 10, 64
#: The width of the memory figures' MLP, WIDE-WIDE-WIDE-CLASSES (8.4 M parameters).
WIDE = 2048


def _data(samples: int, features: int) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    return TensorDataset(x, torch.randint(0, CLASSES, (samples,), generator=generator))


def _fresh(features: int = FEATURES, hidden: int = HIDDEN) -> Any:
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.trainer_overhead import _model

    torch.manual_seed(0)
    return _model(features, hidden, CLASSES)


def _hand(dataset: Any, epochs: int, device: Any, root: str) -> None:
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _fresh().to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model.net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = model.configure_optimizers()
    launched.hand_loop(model, optimizer, dataset, epochs, batch=BATCH, device=device)


def _trainer(dataset: Any, epochs: int, device: Any, root: str) -> None:
    from torch import nn
    from torch.utils.data import DataLoader

    import accelctl

    model = _fresh()
    # The hand-written loop's units (the default would take the Sequential as one unit).
    model.fsdp_modules = lambda: [layer for layer in model.net if isinstance(layer, nn.Linear)]
    trainer = accelctl.Trainer(
        strategy="fsdp", max_epochs=epochs, root_dir=root, enable_progress_bar=False
    )
    trainer.fit(model, DataLoader(dataset, batch_size=BATCH, shuffle=True))


def held_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """Count the bytes of storage this process holds for a model and its optimizer.

    ``model``'s parameters and gradients and ``optimizer``'s states: a sharded tensor's local shard,
    each storage once.
    """
    import torch
    from torch.distributed.tensor import DTensor

    seen: set[int] = set()

    def size(tensor: Any) -> int:
        if isinstance(tensor, DTensor):
            tensor = tensor.to_local()
        if not isinstance(tensor, torch.Tensor):
            return 0
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return int(storage.nbytes())

    parameters = list(model.parameters())
    states = [value for state in optimizer.state.values() for value in state.values()]
    held = {
        "parameters": sum(size(p) for p in parameters),
        "gradients": sum(size(p.grad) for p in parameters if p.grad is not None),
        "optimizer": sum(size(value) for value in states),
    }
    return {**held, "total": sum(held.values())}


def _memory(strategy: str, root: str) -> dict[str, int]:
    """One epoch of the wide MLP through the Trainer; this process's bytes after its last step."""
    from torch.utils.data import DataLoader

    import accelctl

    model = _fresh(WIDE, WIDE)
    measured: dict[str, int] = {}
    make_optimizer = model.configure_optimizers

    def configure_optimizers() -> Any:
        model.optimizer = make_optimizer()
        return model.optimizer

    def on_epoch_end(trainer: Any) -> None:
        measured.update(held_bytes(model, model.optimizer))

    model.configure_optimizers, model.on_epoch_end = configure_optimizers, on_epoch_end
    trainer = accelctl.Trainer(
        strategy=strategy, max_epochs=1, root_dir=root, enable_progress_bar=False,
        enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(model, DataLoader(_data(BATCH * 2 * 2, WIDE), batch_size=BATCH, shuffle=True))
    return measured


def worker(out: Path, repeats: int, quick: bool) -> None:
    """In each process ``accelctl launch`` started, time the loops and measure the memory.

    Rank 0 writes ``out``.
    """
    import torch.distributed as dist

    selection, device = launched.joined_group(set_up_device=False)
    dataset, epochs = _data(BATCH * 2 * (2 if quick else 64), FEATURES), 1 if quick else 2
    loops = {"hand": _hand, "trainer": _trainer}
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as root:
        times, _ = launched.timed_in_turns(
            loops, repeats, epochs, dataset=dataset, device=device, root=root
        )
        memory = {strategy: _memory(strategy, root) for strategy in ("ddp", "fsdp")}
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, memory)
    if dist.get_rank() == 0:
        steps = epochs * len(dataset) // (BATCH * dist.get_world_size())
        result = {
            **launched.group_result(selection, steps, times),
            "memory_bytes_per_rank": per_rank,
        }
        out.write_text(json.dumps(result))
    dist.destroy_process_group()


def run(repeats: int = 5, quick: bool = False, accelerator: str = "cpu") -> dict[str, Any]:
    """Start the processes on 2 devices of ``accelerator``; rank 0's figures as plain data."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    measured = launched.launch_workers(
        __file__,
        accelerator=accelerator,
        devices=2,
        options=launched.worker_options(repeats, quick),
        env=env,
    )
    times = measured["times_s"]
    medians = {name: statistics.median(values) for name, values in times.items()}
    paired = [ours / hand for ours, hand in zip(times["trainer"], times["hand"], strict=True)]
    memory = measured["memory_bytes_per_rank"]
    steps = measured["steps_per_run"]
    return {
        **measured,
        "model": f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, SGD with momentum, batch {BATCH}",
        "memory_model": f"MLP {WIDE}-{WIDE}-{WIDE}-{CLASSES}, SGD with momentum, batch {BATCH}",
        "repeats": repeats,
        "quick": quick,
        "median_s": {name: round(value, 4) for name, value in medians.items()},
        "ms_per_step": {name: round(1000 * value / steps, 2) for name, value in medians.items()},
        "ratio_trainer": round(medians["trainer"] / medians["hand"], 4),
        "ratio_trainer_paired": round(statistics.median(paired), 4),
        "ratio_trainer_fastest": round(min(times["trainer"]) / min(times["hand"]), 4),
        # FSDP2's bytes per rank over DDP's, for rank 0 (the ranks hold equal shares here)
        "memory_ratio_fsdp_ddp": round(memory[0]["fsdp"]["total"] / memory[0]["ddp"]["total"], 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--accelerator", default="cpu", help="cpu (default) or openreg")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.repeats, args.quick)
        return
    result = run(args.repeats, args.quick, args.accelerator)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    per_step, memory = result["ms_per_step"], result["memory_bytes_per_rank"][0]
    print(
        f"2 {result['accelerator']} processes over {result['backend']}: hand-written fully_shard "
        f"{per_step['hand']} ms/step, Trainer(strategy='fsdp') {per_step['trainer']} (medians "
        f"of {result['repeats']}); Trainer / hand: {result['ratio_trainer']:.3f}x\n"
        f"rank 0 holds {memory['ddp']['total'] / 2**20:.1f} MiB under DDP, "
        f"{memory['fsdp']['total'] / 2**20:.1f} MiB under FSDP2 "
        f"({result['memory_ratio_fsdp_ddp']:.3f}x)"
    )


if __name__ == "__main__":
    main()

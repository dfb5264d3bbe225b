"""What the bridges' FSDP2 runs share (``fsdp_lightning_run.py``, ``fsdp_accelerate_run.py``)
and the single-process run their weights are compared with.

Every run trains :func:`make_net` on :func:`dataset` with SGD, ``PER_PROCESS_BATCH`` samples per
process and step, each process recording the ids of the samples of each of its steps (the
framework decides which: Lightning's ``DistributedSampler`` shuffles, Accelerate deals whole
batches out in turns). FSDP2 averages the processes' gradients, so a step is the gradient of the
mean loss over all of that step's samples (the processes' batches are the same size), which
:func:`reference` takes in one process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import TensorDataset

SAMPLES, PER_PROCESS_BATCH, EPOCHS, LEARNING_RATE = 64, 16, 2, 0.1


def make_net() -> torch.nn.Sequential:
    """Two layers whose first weight (8 x 4) splits into equal halves across 2 processes."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def dataset() -> TensorDataset:
    """``SAMPLES`` points of a fixed linear target: ``(id, x, y)``."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.5
    return TensorDataset(torch.arange(SAMPLES), x, y)


def loader() -> torch.utils.data.DataLoader[tuple[torch.Tensor, ...]]:
    """One process's loader before the framework shards it: in order, ``PER_PROCESS_BATCH``."""
    return torch.utils.data.DataLoader(dataset(), batch_size=PER_PROCESS_BATCH, shuffle=False)


def reference(steps: list[list[int]]) -> dict[str, torch.Tensor]:
    """The weights of the same training in one process, each step on the samples ``steps``
    lists (every process's of that step)."""
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    _, x, y = dataset().tensors
    for ids in steps:
        loss = torch.nn.functional.mse_loss(net(x[ids]), y[ids])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {name: p.detach().clone() for name, p in net.named_parameters()}


def sharding(net: torch.nn.Module) -> dict[str, Any]:
    """How ``net``'s parameters are held in this process: their class, the elements of this
    process's shard, the device mesh's device type."""
    from torch.distributed.tensor import DTensor

    params = dict(net.named_parameters())
    first = next(iter(params.values()))
    return {
        "classes": sorted({type(p).__name__ for p in params.values()}),
        "local_numel": {
            name: (p.to_local() if isinstance(p, DTensor) else p).numel()
            for name, p in params.items()
        },
        "numel": {name: p.numel() for name, p in params.items()},
        "mesh": first.device_mesh.device_type if isinstance(first, DTensor) else None,
        "device": str(first.device),
    }


def full_weights(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole, gathered from the processes' shards (a collective: every process
    calls it), on the CPU."""
    from torch.distributed.tensor import DTensor

    return {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu().clone()
        for name, p in net.named_parameters()
    }


def write(out: Path, rank: int, report: dict[str, Any], weights: dict[str, torch.Tensor]) -> None:
    """``out/rank<r>.json`` and ``out/rank<r>.pt`` (read back by ``tests/rankresults.py``)."""
    out.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out / f"rank{rank}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(report))

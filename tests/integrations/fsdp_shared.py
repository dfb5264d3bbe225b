"""What the bridges' FSDP2 runs share, and the single-process run their weights are compared with.

The runs are ``fsdp_lightning_run.py`` and ``fsdp_accelerate_run.py``.

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
    """Return the weights of the same training in one process.

    Each step on the samples ``steps`` lists for it (every process's of that step).
    """
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
    """Describe how ``net``'s parameters are held in this process.

    Their class, the elements of this process's shard, the device mesh's device type.
    """
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
    """Return every parameter whole, on the CPU, gathered from the processes' shards.

    A collective: every process calls it.
    """
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


def check_run(
    reports: list[dict[str, Any]],
    weights: list[dict[str, torch.Tensor]],
    device_type: str,
    backend: str,
) -> None:
    """Assert what every 2-process run must show, from its ranks' reports and weights.

    Each rank on its own ``device_type`` process over ``backend``, its own samples, the loss
    falling; the parameters sharded on a ``device_type`` mesh; both ranks' gathered weights equal,
    and equal to :func:`reference` on the samples each step saw.
    """
    assert [r["rank"] for r in reports] == [0, 1]
    steps = EPOCHS * SAMPLES // (2 * PER_PROCESS_BATCH)
    for report in reports:
        assert report["world_size"] == 2 and report["backend"] == backend
        assert report["root_device"].split(":")[0] == device_type
        assert len(report["seen"]) == steps and len(report["losses"]) == steps
    # Every step, each rank its own samples; every epoch, all samples once.
    per_epoch = steps // EPOCHS
    for epoch in range(EPOCHS):
        taken = [
            r["seen"][step]
            for r in reports
            for step in range(epoch * per_epoch, (epoch + 1) * per_epoch)
        ]
        assert sorted(i for ids in taken for i in ids) == list(range(SAMPLES))
    mean = [sum(pair) / 2 for pair in zip(*(r["losses"] for r in reports), strict=True)]
    assert mean[-1] < mean[0], mean

    for report in reports:
        assert report["classes"] == ["DTensor"] and report["mesh"] == device_type
    # fully_shard splits each parameter along its first dimension: the first layer's 8 x 4
    # weight in halves; the last layer's 1 x 8 weight whole on rank 0, nothing on rank 1.
    numel = reports[0]["numel"]
    assert [r["local_numel"]["0.weight"] for r in reports] == [numel["0.weight"] // 2] * 2
    assert [r["local_numel"]["2.weight"] for r in reports] == [numel["2.weight"], 0]
    for name in numel:
        assert sum(r["local_numel"][name] for r in reports) == numel[name]

    for name in weights[0]:  # the gathered weights, bit for bit
        assert torch.equal(weights[0][name], weights[1][name]), name
    expected = reference(
        [first + second for first, second in zip(*(r["seen"] for r in reports), strict=True)]
    )
    initial = dict(make_net().named_parameters())
    assert weights[0].keys() == expected.keys()
    for name, tensor in expected.items():
        assert not torch.equal(tensor, initial[name].detach()), name  # it trained
        # Not bit for bit: one process takes the mean over a step's 32 samples, two processes
        # each over 16, then FSDP2 averages the gradients; float32 rounds differently.
        torch.testing.assert_close(weights[0][name], tensor, rtol=1e-5, atol=1e-6)


#: A hang guard only (each process imports torch and Lightning or Accelerate on a loaded
#: machine); nothing is timed.
RUN_TIMEOUT_S = 300


def run_clean(argv: list[str], cwd: Path) -> None:
    """Run ``argv`` (a bridge's 2-process run) in a clean environment; assert it succeeded.

    Without this environment's launcher, scheduler, Accelerate or accelctl choices, and with no
    scheduler on ``PATH`` (Lightning looks for SLURM's ``srun``).
    """
    import os
    import subprocess
    import sys

    dropped = ("ACCELCTL_", "ACCELERATE_", "SLURM_", "TORCHELASTIC_", "FSDP_")
    launcher = {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped) and k not in launcher}
    env["PATH"] = str(Path(sys.executable).parent)
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[-4000:]

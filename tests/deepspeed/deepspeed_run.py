"""DeepSpeed training runs through ``accelctl.integrations.deepspeed``, as a user's script:
``python deepspeed_run.py OUT STAGES [STEPS]`` under a launcher (``STAGES``: ``"2,3"``). For each
ZeRO stage, one after the other in the same processes: a tiny MLP with the same weights on every
device, the data of each rank drawn on the CPU from a seed of its own, a torch optimizer (AdamW);
each rank writes ``OUT/zero<stage>/rank<r>.json`` (where it ran, its losses) and
``OUT/zero<stage>/rank<r>.pt`` (the full weights at the end, gathered under ZeRO-3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import deepspeed
import torch

import accelctl.integrations.deepspeed as bridge


def train(out: Path, stage: int, steps: int) -> None:
    """One run of ZeRO ``stage``, its results under ``out``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    rank = engine.global_rank
    data = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8, generator=data).to(engine.device)
        y = torch.randn(4, 4, generator=data).to(engine.device)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    parameters = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(parameters, enabled=stage == 3):
        weights = {n: p.detach().to("cpu").clone() for n, p in engine.module.named_parameters()}
    out.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out / f"rank{rank}.pt")
    report = {
        "rank": rank,
        "world_size": engine.world_size,
        "device": str(engine.device),
        "parameter_device": str(parameters[0].device),
        "accelerator": type(deepspeed.accelerator.get_accelerator()).__name__,
        "accelctl": bridge.ACCELERATOR.handle.name,
        "backend": torch.distributed.get_backend(),
        "losses": losses,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    for stage in sys.argv[2].split(","):
        train(Path(sys.argv[1]) / f"zero{stage}", int(stage), steps)

"""DeepSpeed training runs through ``accelctl.integrations.deepspeed``, as a user's script:
``python deepspeed_run.py OUT STAGES [OTHER]`` under a launcher (``STAGES``: ``"2,3"``). For
each ZeRO stage, one after the other in the same processes: a tiny MLP with the same weights on
every device, the data of each rank and step drawn on the CPU from a seed of their own, a torch
optimizer (AdamW), 4 steps. Then the same run cut after 2 steps: ``engine.save_checkpoint``, a
new model and engine, ``engine.load_checkpoint``, the 2 steps left. Each rank writes
``OUT/zero<stage>/rank<r>.json`` (where it ran, its losses, the resumed run's losses) and
``OUT/zero<stage>/rank<r>.pt`` / ``resumed-rank<r>.pt`` (the full weights at the end, gathered
under ZeRO-3). With ``OTHER``, another run's folder, that run's cut checkpoint is resumed here
too (``crossed-rank<r>.pt``): one written on openreg, loaded by CPU processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import deepspeed
import torch

import accelctl.integrations.deepspeed as bridge

STEPS, CUT = 4, 2


def engine_for(stage: int) -> Any:
    """A new model (the same initial weights every time) and its DeepSpeed engine."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def steps(engine: Any, first: int, last: int) -> list[float]:
    """Steps ``first`` to ``last - 1``; each step's batch drawn from a seed of its own."""
    losses = []
    for step in range(first, last):
        data = torch.Generator().manual_seed(1000 * (engine.global_rank + 1) + step)
        x = torch.randn(4, 8, generator=data).to(engine.device)
        y = torch.randn(4, 4, generator=data).to(engine.device)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def full_weights(engine: Any, stage: int) -> dict[str, torch.Tensor]:
    """The model's whole weights on the CPU (gathered from the ranks under ZeRO-3)."""
    parameters = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(parameters, enabled=stage == 3):
        return {n: p.detach().to("cpu").clone() for n, p in engine.module.named_parameters()}


def run(out: Path, stage: int, other: Path | None) -> None:
    """The uncut run and the resumed one of ZeRO ``stage``, their results under ``out``; and,
    with ``other`` (another run's ``OUT/zero<stage>``), that run's cut checkpoint resumed here
    (``crossed-rank<r>.pt``)."""
    out.mkdir(parents=True, exist_ok=True)
    engine = engine_for(stage)
    rank = engine.global_rank
    losses = steps(engine, 0, STEPS)
    torch.save(full_weights(engine, stage), out / f"rank{rank}.pt")
    report = {
        "rank": rank,
        "world_size": engine.world_size,
        "device": str(engine.device),
        "parameter_device": str(next(engine.module.parameters()).device),
        "accelerator": type(deepspeed.accelerator.get_accelerator()).__name__,
        "accelctl": bridge.ACCELERATOR.handle.name,
        "backend": torch.distributed.get_backend(),
        "losses": losses,
    }
    cut = engine_for(stage)
    resumed_losses = steps(cut, 0, CUT)
    cut.save_checkpoint(str(out / "checkpoint"), tag="cut")
    resumed = engine_for(stage)
    resumed.load_checkpoint(str(out / "checkpoint"), tag="cut")
    report["resumed_steps"] = resumed.global_steps
    resumed_losses += steps(resumed, CUT, STEPS)
    report["resumed_losses"] = resumed_losses
    torch.save(full_weights(resumed, stage), out / f"resumed-rank{rank}.pt")
    if other is not None:
        crossed = engine_for(stage)
        crossed.load_checkpoint(str(other / "checkpoint"), tag="cut")
        report["crossed_losses"] = steps(crossed, CUT, STEPS)
        torch.save(full_weights(crossed, stage), out / f"crossed-rank{rank}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    # DeepSpeed's own launcher passes --local_rank=N first (LOCAL_RANK is set too).
    argv = [arg for arg in sys.argv[1:] if not arg.startswith("--local_rank")]
    other = Path(argv[2]) if len(argv) > 2 else None
    for stage in argv[1].split(","):
        run(Path(argv[0]) / f"zero{stage}", int(stage), other and other / f"zero{stage}")

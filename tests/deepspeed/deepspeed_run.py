"""DeepSpeed training runs through ``accelctl.integrations.deepspeed``, as a user's script:
``python deepspeed_run.py OUT RUNS [OTHER]`` under a launcher. ``RUNS``: ZeRO stages, ``"1,2,3"``
(``"2-bf16"``: in bf16 mixed precision). Each, one after the other in the same processes: a tiny
MLP with the same weights on every device, the data of each rank and step drawn on the CPU from a
seed of their own, a torch optimizer (AdamW), 4 steps; then the same run cut after 2 steps
(``engine.save_checkpoint``, a new model and engine, ``engine.load_checkpoint``, the 2 steps
left). Each rank writes ``OUT/zero<run>/rank<r>.json`` (where it ran, its losses, the resumed
run's losses) and ``rank<r>.pt`` / ``resumed-rank<r>.pt`` there (the full weights at the end,
gathered under ZeRO-3). With ``OTHER``, another run's folder, that run's cut checkpoint is
resumed here too (``crossed-rank<r>.pt``): one written on openreg, loaded by CPU processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import deepspeed
import torch

import accelctl.integrations.deepspeed as bridge

STEPS, CUT = 4, 2


def engine_for(stage: int, bf16: bool = False) -> Any:
    """A new model (the same initial weights every time) and its DeepSpeed engine, in bf16
    mixed precision with ``bf16``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
        "bf16": {"enabled": bf16},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def steps(engine: Any, first: int, last: int) -> list[float]:
    """Steps ``first`` to ``last - 1``; each step's batch drawn from a seed of its own."""
    losses = []
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float32  # the model's
    for step in range(first, last):
        data = torch.Generator().manual_seed(1000 * (engine.global_rank + 1) + step)
        x = torch.randn(4, 8, generator=data).to(engine.device, dtype)
        y = torch.randn(4, 4, generator=data).to(engine.device, dtype)
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


def run(out: Path, stage: int, other: Path | None, bf16: bool = False) -> None:
    """The uncut run and the resumed one of ZeRO ``stage``, their results under ``out``; and,
    with ``other`` (another run's ``OUT/zero<stage>``), that run's cut checkpoint resumed here
    (``crossed-rank<r>.pt``)."""
    out.mkdir(parents=True, exist_ok=True)
    engine = engine_for(stage, bf16)
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
    cut = engine_for(stage, bf16)
    resumed_losses = steps(cut, 0, CUT)
    cut.save_checkpoint(str(out / "checkpoint"), tag="cut")
    resumed = engine_for(stage, bf16)
    resumed.load_checkpoint(str(out / "checkpoint"), tag="cut")
    report["resumed_steps"] = resumed.global_steps
    resumed_losses += steps(resumed, CUT, STEPS)
    report["resumed_losses"] = resumed_losses
    torch.save(full_weights(resumed, stage), out / f"resumed-rank{rank}.pt")
    if other is not None:
        crossed = engine_for(stage, bf16)
        crossed.load_checkpoint(str(other / "checkpoint"), tag="cut")
        report["crossed_losses"] = steps(crossed, CUT, STEPS)
        torch.save(full_weights(crossed, stage), out / f"crossed-rank{rank}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    # DeepSpeed's own launcher passes --local_rank=N first (LOCAL_RANK is set too).
    argv = [arg for arg in sys.argv[1:] if not arg.startswith("--local_rank")]
    other = Path(argv[2]) if len(argv) > 2 else None
    for name in argv[1].split(","):  # "2", or "2-bf16" for bf16 mixed precision
        stage, _, precision = name.partition("-")
        folder = f"zero{name}"
        run(Path(argv[0]) / folder, int(stage), other and other / folder, precision == "bf16")

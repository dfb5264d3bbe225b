"""DeepSpeed training runs through ``accelctl.integrations.deepspeed``, as a user's script.

``python deepspeed_run.py OUT RUNS [OTHER]`` under a launcher. ``RUNS``: ZeRO stages, ``"1,2,3"``
(``"2-bf16"``: in bf16 mixed precision; ``"2-offload"``: ZeRO-Offload to the CPU). Each, one after
the other in the same processes: a tiny MLP with the same weights on every device, the data of each
rank and step drawn on the CPU from a seed of their own, a torch optimizer (AdamW), 4 steps; then
the same run cut after 2 steps (``engine.save_checkpoint``, a new model and engine,
``engine.load_checkpoint``, the 2 steps left). Each rank writes ``OUT/zero<run>/rank<r>.json``
(where it ran, its losses, the resumed run's losses, the kernels ``ACCELCTL_CPU_FALLBACK=1`` ran on
the CPU during the run: null where it is off) and ``rank<r>.pt`` / ``resumed-rank<r>.pt`` there (the
full weights at the end, gathered under ZeRO-3). With ``OTHER``, another run's folder, that run's
cut checkpoint is resumed here too (``crossed-rank<r>.pt``): one written on openreg, loaded by CPU
processes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import deepspeed
import torch

import accelctl.integrations.deepspeed as bridge
from accelctl._kernels.setup import fallback_calls_by_op

STEPS, CUT = 4, 2


def engine_for(stage: int, variant: str = "") -> Any:
    """Return a new model (the same initial weights every time) and its DeepSpeed engine.

    ``variant`` ``"bf16"``: in bf16 mixed precision; ``"offload"``: ZeRO-Offload of the optimizer
    (and, in ZeRO-3, of the parameters) to the CPU, the torch optimizer stepping there.
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
        "bf16": {"enabled": variant == "bf16"},
    }
    if variant == "offload":
        zero: dict[str, Any] = config["zero_optimization"]  # type: ignore[assignment]
        zero["offload_optimizer"] = {"device": "cpu"}
        if stage == 3:
            zero["offload_param"] = {"device": "cpu"}
        config["zero_force_ds_cpu_optimizer"] = False  # a torch optimizer, not CPUAdam
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


def run(out: Path, stage: int, other: Path | None, variant: str = "") -> None:
    """Run ZeRO ``stage`` uncut and resumed, their results under ``out``.

    With ``other`` (another run's ``OUT/zero<stage>``), that run's cut checkpoint is resumed here
    too (``crossed-rank<r>.pt``).
    """
    out.mkdir(parents=True, exist_ok=True)
    before = fallback_calls_by_op(bridge.ACCELERATOR.process_device.type) or {}
    engine = engine_for(stage, variant)
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
        "dtype": str(next(engine.module.parameters()).dtype),
    }
    cut = engine_for(stage, variant)
    resumed_losses = steps(cut, 0, CUT)
    cut.save_checkpoint(str(out / "checkpoint"), tag="cut")
    resumed = engine_for(stage, variant)
    resumed.load_checkpoint(str(out / "checkpoint"), tag="cut")
    report["resumed_steps"] = resumed.global_steps
    resumed_losses += steps(resumed, CUT, STEPS)
    report["resumed_losses"] = resumed_losses
    torch.save(full_weights(resumed, stage), out / f"resumed-rank{rank}.pt")
    if other is not None:
        crossed = engine_for(stage, variant)
        crossed.load_checkpoint(str(other / "checkpoint"), tag="cut")
        report["crossed_losses"] = steps(crossed, CUT, STEPS)
        torch.save(full_weights(crossed, stage), out / f"crossed-rank{rank}.pt")
    # Kernels run on the CPU in the device's place (ACCELCTL_CPU_FALLBACK=1): null where off.
    calls = fallback_calls_by_op(bridge.ACCELERATOR.process_device.type)
    report["cpu_fallback_calls"] = calls and {
        op: count - before.get(op, 0) for op, count in calls.items() if count > before.get(op, 0)
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    # DeepSpeed's own launcher passes --local_rank=N first (LOCAL_RANK is set too).
    argv = [arg for arg in sys.argv[1:] if not arg.startswith("--local_rank")]
    other = Path(argv[2]) if len(argv) > 2 else None
    for name in argv[1].split(","):  # "2", "2-bf16" (bf16 mixed precision), "2-offload"
        stage, _, variant = name.partition("-")
        folder = f"zero{name}"
        run(Path(argv[0]) / folder, int(stage), other and other / folder, variant)

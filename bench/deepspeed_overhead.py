"""A ZeRO-2 DeepSpeed step through accelctl's bridge against DeepSpeed's own CPU accelerator.

The bridge (``import accelctl.integrations.deepspeed``) makes DeepSpeed's accelerator from the CPU
plugin; DeepSpeed's own is what ``DS_ACCELERATOR=cpu`` selects, no bridge. On 2 CPU processes over
gloo.

One ``accelctl launch --accelerator cpu --devices 2`` starts the processes; each makes two
engines of the same MLP (same seed, same data, a torch AdamW, ZeRO stage 2), one while the
bridge's accelerator is DeepSpeed's, one while DeepSpeed's own ``CPU_Accelerator`` is (switched
with DeepSpeed's ``set_accelerator``, which is all the bridge does to select its own; the engine
asks the accelerator at every step). The two then take turns, the order rotating every repeat:
each turn sets its accelerator, and rank 0 times ``STEPS`` steps (forward, ``engine.backward``,
``engine.step``) from a barrier before them to a barrier after them; each rank also counts the
CPU time it spent in them (``time.process_time``, summed over the ranks: less moved by other
work on a shared machine than the wall time). The figures are the medians of the per-turn ratios
(bridge over DeepSpeed's own) with a 95% interval (a sign test's order statistics).

    python bench/deepspeed_overhead.py             # 9 repeats
    python -m bench --sections deepspeed           # as a section of the suite
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (the workers are): the repository's bench
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import launched

FEATURES, HIDDEN, CLASSES, BATCH = 256, 1024, 10, 64
#: Steps per timed turn.
STEPS = 20
ENGINES = ("deepspeed_cpu", "bridge")


def _engine(seed: int = 0) -> Any:
    import deepspeed
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
        nn.Linear(HIDDEN, CLASSES),
    )  # fmt: skip
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "zero_optimization": {"stage": 2},
        "steps_per_print": 1_000_000,
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def _steps(engine: Any, batches: list[Any]) -> float:
    import torch

    loss = None
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(engine(x), y)
        engine.backward(loss)
        engine.step()
    return float(loss.detach()) if loss is not None else 0.0


def worker(out: Path, repeats: int, quick: bool) -> None:
    """In each process ``accelctl launch`` started, time the two engines' turns.

    Rank 0 writes ``out``.
    """
    import deepspeed
    import torch
    import torch.distributed as dist
    from deepspeed.accelerator import set_accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    import accelctl.integrations.deepspeed as bridge

    accelerators = {"bridge": bridge.ACCELERATOR, "deepspeed_cpu": CPU_Accelerator()}
    deepspeed.init_distributed(dist_backend="gloo")
    engines = {}
    for name in ENGINES:
        set_accelerator(accelerators[name])
        engines[name] = _engine()
    generator = torch.Generator().manual_seed(1 + dist.get_rank())
    steps = 2 if quick else STEPS
    batches = [
        (torch.randn(BATCH, FEATURES, generator=generator),
         torch.randint(0, CLASSES, (BATCH,), generator=generator))
        for _ in range(steps)
    ]  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in ENGINES}
    cpu: dict[str, list[float]] = {name: [] for name in ENGINES}
    for name in ENGINES:  # warm-up: first steps, allocations
        set_accelerator(accelerators[name])
        _steps(engines[name], batches[:2])
    for repeat in range(repeats):
        turn = repeat % len(ENGINES)
        for name in ENGINES[turn:] + ENGINES[:turn]:
            set_accelerator(accelerators[name])
            dist.barrier()
            started, started_cpu = time.perf_counter(), time.process_time()
            _steps(engines[name], batches)
            used = time.process_time() - started_cpu
            dist.barrier()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(used)
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, cpu)
    set_accelerator(accelerators["bridge"])
    if dist.get_rank() == 0:
        result = {
            "accelerators": {name: type(a).__name__ for name, a in accelerators.items()},
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "deepspeed": deepspeed.__version__,
            "steps_per_turn": steps,
            "times_s": {name: [round(t, 5) for t in values] for name, values in times.items()},
            # CPU seconds of the turn, summed over the ranks (less moved by others' load)
            "cpu_s": {
                name: [round(sum(rank[name][i] for rank in per_rank), 5) for i in range(repeats)]
                for name in ENGINES
            },
        }
        out.write_text(json.dumps(result))
    dist.destroy_process_group()


def _spread(ratios: list[float]) -> dict[str, float]:
    """Return the ratios' median and a 95% interval for it.

    The interval is the order statistics a sign test gives; the whole range below 6 repeats.
    """
    ordered = sorted(ratios)
    n = len(ordered)
    # ranks k and n-1-k with P(Binomial(n, 1/2) < k+1) <= 0.025 on each side
    from math import comb

    k, tail = 0, 0.0
    while k < n // 2:
        tail += comb(n, k) / 2**n
        if tail > 0.025:
            break
        k += 1
    low, high = (ordered[0], ordered[-1]) if k == 0 else (ordered[k - 1], ordered[n - k])
    return {"median": statistics.median(ordered), "low": low, "high": high}


def run(repeats: int = 9, quick: bool = False) -> dict[str, Any]:
    """Start the 2 processes, collect rank 0's figures; plain data for a report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELCTL_", "DS_"))}
    measured = launched.launch_workers(
        __file__,
        accelerator="cpu",
        devices=2,
        options=launched.worker_options(repeats, quick),
        env=env,
    )
    times = measured["times_s"]
    steps = measured["steps_per_turn"]
    paired = [
        ours / theirs for ours, theirs in zip(times["bridge"], times["deepspeed_cpu"], strict=True)
    ]
    spread = _spread(paired)
    cpu = measured["cpu_s"]
    cpu_paired = [
        ours / theirs for ours, theirs in zip(cpu["bridge"], cpu["deepspeed_cpu"], strict=True)
    ]
    cpu_spread = _spread(cpu_paired)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        **measured,
        "model": f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, AdamW, ZeRO-2, batch {BATCH}",
        "repeats": repeats,
        "quick": quick,
        "ms_per_step": {name: round(1000 * v / steps, 3) for name, v in medians.items()},
        "ratio_bridge_paired": round(spread["median"], 4),
        "ratio_bridge_ci95": [round(spread["low"], 4), round(spread["high"], 4)],
        "ratio_bridge_fastest": round(min(times["bridge"]) / min(times["deepspeed_cpu"]), 4),
        "cpu_ratio_bridge_paired": round(cpu_spread["median"], 4),
        "cpu_ratio_bridge_ci95": [round(cpu_spread["low"], 4), round(cpu_spread["high"], 4)],
        "target": 1.02,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.repeats, args.quick)
        return
    result = run(args.repeats, args.quick)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    per_step = result["ms_per_step"]
    low, high = result["ratio_bridge_ci95"]
    print(
        f"ZeRO-2 on 2 CPU processes over {result['backend']}: DeepSpeed's CPU accelerator "
        f"{per_step['deepspeed_cpu']} ms/step, through the bridge {per_step['bridge']} "
        f"(medians of {result['repeats']}); bridge / DeepSpeed's own: "
        f"{result['ratio_bridge_paired']:.4f}x (95% interval {low:.4f} to {high:.4f}); "
        f"in CPU time {result['cpu_ratio_bridge_paired']:.4f}x"
    )


if __name__ == "__main__":
    main()

"""What counting the model's FLOPs costs a fit: ``flops_per_sample="auto"`` against ``None``.

``Trainer(flops_per_sample="auto")`` is the default: the first step under torch's
``FlopCounterMode``, then ``flops_per_second`` and ``mfu`` in every line; ``None`` has neither. The
same model, data and steps.

Both train a fresh copy of bench/trainer_overhead.py's MLP (same seed) in this one process,
alternating which goes first in each repeat, with a declared CPU peak so that ``mfu`` is computed
too. On a shared machine other work only ever adds time, so the verdict is on the ratio of the
fastest runs (target: <= 1.02); the ratio of the medians and the median of each repeat's pair
are reported beside it, and the one-step fit's time with and without the counter (what counting
costs, once per fit).

    python bench/flops_overhead.py                  # CPU, 5 repeats
    python -m bench --sections flops                # as a section of the benchmark suite
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

#: Target of the ratio counted / not counted.
TARGET = 1.02


def _fit(model: Any, loader: Any, epochs: int, flops: Any, root_dir: str) -> float:
    import accelctl
    from accelctl_cpu import CPUAccelerator

    started = time.perf_counter()
    trainer = accelctl.Trainer(
        accelerator=CPUAccelerator(peak=1e12),
        devices=1,
        max_epochs=epochs,
        root_dir=root_dir,
        enable_progress_bar=False,
        enable_checkpointing=False,
        flops_per_sample=flops,
    )
    trainer.fit(model, loader)
    seconds = time.perf_counter() - started
    if flops is not None:
        assert "mfu" in trainer.metrics, trainer.metrics  # the counted fit did compute it
    return seconds


def _first_step_s(fresh: Any, loader: Any, flops: Any, root_dir: str) -> float:
    """One fit of a single step: the first step alone, with or without the counter."""
    import itertools

    batches = list(itertools.islice(iter(loader), 1))
    return _fit(fresh(), batches, 1, flops, root_dir)


def run(repeats: int = 5, quick: bool = False, batch_size: int = 128) -> dict[str, Any]:
    """Time fits with and without counting ``repeats`` times (after one warm-up each)."""
    import torch

    from .trainer_overhead import workload

    loader, epochs, fresh, described = workload(batch_size, quick)

    counted: list[float] = []
    plain: list[float] = []
    first_counted: list[float] = []
    first_plain: list[float] = []
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as root_dir:
        _fit(fresh(), loader, 1, "auto", root_dir)  # warm-up: imports, kernels, caches
        _fit(fresh(), loader, 1, None, root_dir)
        for repeat in range(max(1, repeats)):
            order = [("auto", counted), (None, plain)]
            if repeat % 2:  # alternate the order: drift in the machine hits both
                order.reverse()
            for flops, times in order:
                times.append(_fit(fresh(), loader, epochs, flops, root_dir))
            first_counted.append(_first_step_s(fresh, loader, "auto", root_dir))
            first_plain.append(_first_step_s(fresh, loader, None, root_dir))
    counted_median, plain_median = statistics.median(counted), statistics.median(plain)
    ratio = counted_median / plain_median
    fastest = min(counted) / min(plain)
    paired = statistics.median(c / p for c, p in zip(counted, plain, strict=True))
    steps = epochs * len(loader)
    return {
        "device": "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": described,
        "batch_size": batch_size,
        "steps_per_run": steps,
        "repeats": len(counted),
        "quick": quick,
        "counted_s": [round(t, 4) for t in counted],
        "plain_s": [round(t, 4) for t in plain],
        "counted_median_s": round(counted_median, 4),
        "plain_median_s": round(plain_median, 4),
        "one_step_fit_counted_median_s": round(statistics.median(first_counted), 4),
        "one_step_fit_plain_median_s": round(statistics.median(first_plain), 4),
        "counted_fastest_s": round(min(counted), 4),
        "plain_fastest_s": round(min(plain), 4),
        "ratio": round(ratio, 4),
        "ratio_fastest": round(fastest, 4),
        "ratio_paired": round(paired, 4),
        "target": TARGET,
        "met": None if quick else fastest <= TARGET,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.repeats, args.quick, args.batch_size)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"fastest: counted {result['counted_fastest_s']} s, not counted "
        f"{result['plain_fastest_s']} s ({result['repeats']} each, {result['steps_per_run']} "
        f"steps): ratio {result['ratio_fastest']:.3f}x (target <= {result['target']:.2f}x); "
        f"medians {result['ratio']:.3f}x, pairs {result['ratio_paired']:.3f}x; a one-step fit "
        f"{result['one_step_fit_counted_median_s']} s counted, "
        f"{result['one_step_fit_plain_median_s']} s not"
    )


if __name__ == "__main__":
    main()

"""accelctl.Trainer against a hand-written PyTorch loop: the same model, data and steps.

Both train a fresh copy of the same MLP (same seed) for the same epochs over the same DataLoader,
in this one process, alternating which goes first in each repeat; the figure is the ratio of the
medians (target: <= 1.10 on a CPU, <= 1.03 on a GPU). The Trainer's time includes its
construction (the accelerator's resolution), its metrics file and its logging steps; the hand
loop does the bare minimum (zero_grad, forward, backward, step) and reads the loss once at the end.

    python bench/trainer_overhead.py                 # CPU, 5 repeats
    python bench/trainer_overhead.py --accelerator cuda --repeats 7
    python -m bench --sections trainer               # as a section of the benchmark suite
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

#: Targets of the ratio Trainer / hand-written loop, per device type.
TARGETS = {"cpu": 1.10}
GPU_TARGET = 1.03


def _model(features: int, hidden: int, classes: int) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(features, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    return MLP()


def workload(batch_size: int, quick: bool) -> tuple[Any, int, Callable[[], Any], str]:
    """Return the benchmarks' training: loader, epochs, a maker of fresh MLPs, and its description.

    A shuffled DataLoader of random features and labels; each MLP from the same seed.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    features, hidden, classes = 256, 512, 10
    samples = batch_size * (8 if quick else 200)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    y = torch.randint(0, classes, (samples,), generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)

    def fresh() -> Any:
        torch.manual_seed(0)
        return _model(features, hidden, classes)

    return (
        loader,
        1 if quick else 2,
        fresh,
        f"MLP {features}-{hidden}-{hidden}-{classes}, SGD with momentum",
    )


def _hand_loop(model: Any, loader: Any, epochs: int, device: Any) -> float:
    """The loop a user writes by hand; returns the seconds it took."""
    from torch.nn import functional as F

    started = time.perf_counter()
    model.to(device)
    optimizer = model.configure_optimizers()
    model.train()
    loss = None
    for _ in range(epochs):
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    if loss is not None:
        float(loss.detach())  # wait for the device, as the Trainer's end of epoch does
    return time.perf_counter() - started


def _trainer(model: Any, loader: Any, epochs: int, accelerator: str, root_dir: str) -> float:
    import accelctl

    started = time.perf_counter()
    trainer = accelctl.Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=epochs,
        root_dir=root_dir,
        enable_progress_bar=False,
    )
    trainer.fit(model, loader)
    return time.perf_counter() - started


def run(
    repeats: int = 5, quick: bool = False, accelerator: str = "cpu", batch_size: int = 128
) -> dict[str, Any]:
    """Time both loops ``repeats`` times (after one warm-up each); plain data for a report.

    :param quick: a few steps only (the suite's smoke run), not a meaningful figure.
    """
    import torch

    import accelctl

    device = accelctl.resolve(accelerator, 1).devices[0]
    loader, epochs, fresh, described = workload(batch_size, quick)

    hand: list[float] = []
    ours: list[float] = []
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as root_dir:
        # Warm-up: the first optimizer imports torch._dynamo; kernels and caches warm up.
        _hand_loop(fresh(), loader, 1, device)
        _trainer(fresh(), loader, 1, accelerator, root_dir)
        for repeat in range(max(1, repeats)):
            if repeat % 2 == 0:  # alternate the order: drift in the machine hits both
                hand.append(_hand_loop(fresh(), loader, epochs, device))
                ours.append(_trainer(fresh(), loader, epochs, accelerator, root_dir))
            else:
                ours.append(_trainer(fresh(), loader, epochs, accelerator, root_dir))
                hand.append(_hand_loop(fresh(), loader, epochs, device))
    hand_median, ours_median = statistics.median(hand), statistics.median(ours)
    ratio = ours_median / hand_median
    target = TARGETS.get(device.type, GPU_TARGET)
    steps = epochs * len(loader)
    return {
        "accelerator": accelerator,
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": described,
        "batch_size": batch_size,
        "steps_per_run": steps,
        "repeats": len(hand),
        "quick": quick,
        "hand_loop_s": [round(t, 4) for t in hand],
        "trainer_s": [round(t, 4) for t in ours],
        "hand_loop_median_s": round(hand_median, 4),
        "trainer_median_s": round(ours_median, 4),
        "hand_loop_ms_per_step": round(1000 * hand_median / steps, 3),
        "trainer_ms_per_step": round(1000 * ours_median / steps, 3),
        "ratio": round(ratio, 4),
        "target": target,
        # A quick run's few steps say nothing about the overhead: no verdict.
        "met": None if quick else ratio <= target,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.repeats, args.quick, args.accelerator, args.batch_size)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['device']}: hand-written loop {result['hand_loop_ms_per_step']} ms/step, "
        f"Trainer {result['trainer_ms_per_step']} ms/step (medians of {result['repeats']}, "
        f"{result['steps_per_run']} steps each)\n"
        f"ratio Trainer / hand loop: {result['ratio']:.3f}x (target <= {result['target']:.2f}x: "
        f"{ {True: 'met', False: 'NOT met', None: 'quick run, no verdict'}[result['met']] })"
    )


if __name__ == "__main__":
    main()

"""Train a small CNN on scikit-learn's handwritten digits with accelctl.Trainer.

The digits (1,797 8x8 grey images, 10 classes) ship inside scikit-learn: nothing is downloaded.
``--synthetic N`` trains instead on N generated 3x64x64 images with a wider network: a workload
heavy enough to show an accelerator's speed-up over the CPU.

    python examples/cv_example.py                      # whatever "auto" finds
    python examples/cv_example.py --cpu                # keep off the GPU
    python examples/cv_example.py --accelerator cuda --precision bf16-mixed
    accelctl launch --cpu --devices 2 examples/cv_example.py --epochs 5
    python examples/cv_example.py --synthetic 20000 --epochs 2          # time it with --cpu too

Needs scikit-learn (``pip install scikit-learn``) for the digits. Writes into ``runs/cv_example``
(``--root-dir``): each run's checkpoints in ``checkpoints/run-N``, every run's figures in
``metrics.jsonl`` (``accelctl plot runs/cv_example`` draws the last run). Each epoch's figures are
the Trainer's own line on standard error (``accelctl: epoch 1/10 (step 23): train_loss ...``); the
example prints what the Trainer does not know: the data it trains on, and the wall time.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelctl


class DigitsCNN(nn.Module):
    """A small CNN: convolution blocks, pooled to 4x4, and a classifier.

    ``blocks`` convolution blocks (each halves the image and doubles the channels, from
    ``width``), pooled to 4x4, and a classifier."""

    def __init__(self, in_channels: int, blocks: int, width: int, lr: float) -> None:
        super().__init__()
        self.lr = lr
        layers: list[nn.Module] = []
        channels = in_channels
        for block in range(blocks):
            out = width * 2**block
            layers += [
                nn.Conv2d(channels, out, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(out, out, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
            channels = out
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(4))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(channels * 16, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(self(images), labels)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        images, labels = batch
        logits = self(images)
        return {
            "loss": F.cross_entropy(logits, labels),
            "accuracy": (logits.argmax(dim=1) == labels).float().mean(),
        }

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def digits(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn's digits, scaled to [0, 1], as 1x8x8 images: 80% to train, 20% to test."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit(
            "the digits come with scikit-learn: pip install scikit-learn (or use --synthetic N)"
        ) from None
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(data.target, dtype=torch.long)
    return _split(images, labels, seed)


def synthetic(count: int, seed: int, size: int = 64) -> tuple[TensorDataset, TensorDataset]:
    """Make ``count`` noisy images of 10 smooth random patterns.

    ``count`` noisy 3x``size``x``size`` images of 10 smooth random patterns: learnable, and
    heavy enough (about 2.3 GFLOP per image and step with the wider network) to time."""
    generator = torch.Generator().manual_seed(seed)
    # Smooth patterns (8x8 noise scaled up) that a convolution picks out from the pixel noise.
    coarse = torch.rand(10, 3, 8, 8, generator=generator)
    patterns = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    labels = torch.randint(0, 10, (count,), generator=generator)
    noise = torch.randn(count, 3, size, size, generator=generator)
    images = patterns[labels] + 0.5 * noise
    return _split(images, labels, seed)


def _split(
    images: torch.Tensor, labels: torch.Tensor, seed: int
) -> tuple[TensorDataset, TensorDataset]:
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(order))
    train, test = order[:cut], order[cut:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[test], labels[test])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="same as --accelerator cpu")
    parser.add_argument(
        "--accelerator", default="auto", help='a name or alias, "gpu" or "auto" (default)'
    )
    parser.add_argument("--devices", default="auto", help='"auto" (default), a count, "0,1"')
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--precision", default="32", choices=["32", "bf16-mixed", "16-mixed"], help="default 32"
    )
    parser.add_argument(
        "--synthetic",
        type=int,
        metavar="N",
        default=0,
        help="train on N generated 3x64x64 images with a wider network instead of the digits",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--lr", type=float, default=None, help="default 2e-3 (digits), 1e-3 (--synthetic)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--root-dir",
        default="runs/cv_example",
        help="the run folder: metrics.jsonl and checkpoints/ (default runs/cv_example)",
    )
    args = parser.parse_args(argv)
    if args.cpu:
        if args.accelerator not in ("auto", "cpu"):
            parser.error(
                f"--cpu means --accelerator cpu; not with --accelerator {args.accelerator}"
            )
        args.accelerator = "cpu"
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    started = time.perf_counter()
    torch.manual_seed(args.seed)  # the same initial weights in every process
    if args.synthetic:
        train_set, test_set = synthetic(args.synthetic, args.seed)
        model = DigitsCNN(in_channels=3, blocks=2, width=64, lr=args.lr or 1e-3)
        what = f"{args.synthetic:,} synthetic 3x64x64 images"
    else:
        train_set, test_set = digits(args.seed)
        model = DigitsCNN(in_channels=1, blocks=1, width=32, lr=args.lr or 2e-3)
        what = "scikit-learn digits"
    trainer = accelctl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        max_epochs=args.epochs,
        precision=args.precision,
        root_dir=args.root_dir,
    )
    if trainer.is_global_zero:
        print(
            f"training on {what}: {trainer.accelerator.name} "
            f"({', '.join(str(d) for d in trainer.devices)}), precision {args.precision}",
            flush=True,
        )
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=256)
    trainer.fit(model, train_loader, test_loader)
    if trainer.is_global_zero:
        elapsed = time.perf_counter() - started
        print(
            f"final accuracy {trainer.metrics['val_accuracy']:.2%} in {elapsed:.1f} s "
            f"(wall time, data and start-up included)",
            flush=True,
        )
    return trainer.metrics


if __name__ == "__main__":
    main()

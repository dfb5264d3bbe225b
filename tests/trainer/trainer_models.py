"""Models and data shared by the Trainer tests (imported by path: tests are not a package)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    """Logistic regression on a separable problem; records what each step saw."""

    def __init__(self, features: int = 8, lr: float = 0.5) -> None:
        super().__init__()
        self.linear = nn.Linear(features, 2)
        self.lr = lr
        self.step_dtypes: list[torch.dtype] = []
        self.autocast_enabled: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        self.step_dtypes.append(logits.dtype)
        self.autocast_enabled.append(torch.is_autocast_enabled("cpu"))
        return F.cross_entropy(logits, y)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"accuracy": (self(x).argmax(dim=1) == y).float().mean()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def separable(count: int = 256, features: int = 8, seed: int = 0) -> TensorDataset:
    """Points labelled by the sign of their first coordinate."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, features, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


def loaders(batch_size: int = 32) -> tuple[DataLoader[Any], DataLoader[Any]]:
    train = DataLoader(separable(256, seed=0), batch_size=batch_size, shuffle=True)
    val = DataLoader(separable(128, seed=1), batch_size=50)
    return train, val

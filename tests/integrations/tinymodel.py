"""A LightningModule small enough to train in a second.

Shared by the in-process tests and the DDP script they start.
"""

from __future__ import annotations

import lightning
import torch
from torch.utils.data import DataLoader, TensorDataset


class TinyRegression(lightning.LightningModule):
    """Linear regression on a fixed target; ``losses`` records every training step's loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 1)
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def tiny_loader(samples: int = 64, batch_size: int = 16) -> DataLoader[tuple[torch.Tensor, ...]]:
    """``samples`` points of y = x . w + 0.5 with a fixed seed, in order."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(samples, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.5
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


def quiet_trainer_options() -> dict[str, object]:
    """Lightning's options for a silent, file-free run."""
    return {
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "logger": False,
    }

"""What :meth:`accelctl.Trainer.fit` asks of a model.

The methods it calls, checked up front, and ``training_step`` as a module's forward for DDP.
Imported by the Trainer only (imports torch)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from .._contract.errors import TrainerError


def check_model(model: Any, *, validating: bool) -> None:
    """Refuse what is not a ``torch.nn.Module`` with the methods fit calls, naming those missing."""
    if not isinstance(model, torch.nn.Module):
        raise TrainerError(f"fit() trains a torch.nn.Module, got {type(model).__name__}")
    needed = ["training_step", "configure_optimizers"] + (["validation_step"] if validating else [])
    missing = [name for name in needed if not callable(getattr(model, name, None))]
    if missing:
        raise TrainerError(
            f"{type(model).__name__} lacks {', '.join(missing)}: the Trainer calls "
            "training_step(batch, batch_idx) -> loss tensor, configure_optimizers() -> optimizer"
            + (" and validation_step(batch, batch_idx) -> dict of figures" if validating else "")
        )


def optimizer_of(model: nn.Module) -> torch.optim.Optimizer:
    """The one optimizer ``model.configure_optimizers()`` returns."""
    optimizer = model.configure_optimizers()  # type: ignore[operator]
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TrainerError(
            f"configure_optimizers must return one torch.optim.Optimizer, returned "
            f"{type(optimizer).__name__}"
        )
    return optimizer


class TrainingStep(torch.nn.Module):
    """Runs ``model.training_step`` as a module's forward, so that DDP sees every step.

    DDP prepares its gradient all-reduce in its own ``forward``, which ``training_step``
    bypasses."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return cast(Any, self.model).training_step(batch, batch_idx)

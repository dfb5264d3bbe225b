"""The ``keep_best`` best epoch-end checkpoints of a fit: how they are ranked and named."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checkpoint import CheckpointConfig


@dataclass
class BestCheckpoints:
    """The ``keep_best`` best epoch-end checkpoints: ``[score, file name]``, best first."""

    config: CheckpointConfig
    kept: list[list[Any]] = field(default_factory=list)

    def score_of(self, metrics: Mapping[str, float]) -> float:
        """The ranked figure of an epoch's ``metrics`` (``CheckpointError`` if not there)."""
        from .checkpoint import CheckpointError  # (which imports this module)

        name = self.config.best_metric
        if name not in metrics:
            raise CheckpointError(
                f"keep_best={self.config.keep_best} ranks checkpoints by best_metric={name!r}, "
                f"which this fit's epochs do not report; they report: {', '.join(sorted(metrics))}"
                f" (validation figures are val_<name> of validation_step's dict)"
            )
        return float(metrics[name])

    def offer(self, score: float, name: str) -> tuple[bool, list[str]]:
        """Whether a checkpoint scoring ``score`` is kept, and the file names it pushes out."""
        import math

        if not math.isfinite(score):
            return False, []
        sign = 1.0 if self.config.best_mode == "min" else -1.0
        ranked = sorted([*self.kept, [score, name]], key=lambda item: sign * float(item[0]))
        self.kept, dropped = ranked[: self.config.keep_best], ranked[self.config.keep_best :]
        return any(item[1] == name for item in self.kept), [str(item[1]) for item in dropped]


def best_name(epoch: int, metric: str, score: float) -> str:
    """``best-epoch=3-val_loss=0.1234.ckpt``."""
    safe = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in metric)
    return f"best-epoch={epoch}-{safe}={score:.4g}.ckpt"

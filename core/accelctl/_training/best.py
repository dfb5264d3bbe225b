"""The ``keep_best`` best epoch-end checkpoints of a fit: how they are ranked and named."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Offer:
    """What became of a checkpoint offered to :class:`BestCheckpoints`."""

    #: Whether it ranks among the best and is kept.
    kept: bool
    #: The file names it pushed out of the best (its own, when it is not kept).
    dropped: list[str]


@dataclass
class BestCheckpoints:
    """The ``keep`` best epoch-end checkpoints, best first.

    ``[score, file name]``, best first, lower scores better with ``mode="min"``, higher with
    ``"max"``."""

    keep: int
    mode: str
    kept: list[list[Any]] = field(default_factory=list)

    def offer(self, score: float, name: str) -> Offer:
        """Whether a checkpoint scoring ``score`` is kept, and the file names it pushes out."""
        if not math.isfinite(score):
            return Offer(kept=False, dropped=[])
        sign = 1.0 if self.mode == "min" else -1.0
        ranked = sorted([*self.kept, [score, name]], key=lambda item: sign * float(item[0]))
        self.kept, dropped = ranked[: self.keep], ranked[self.keep :]
        return Offer(
            kept=any(item[1] == name for item in self.kept),
            dropped=[str(item[1]) for item in dropped],
        )


def best_name(epoch: int, metric: str, score: float) -> str:
    """``best-epoch=3-val_loss=0.1234.ckpt``."""
    safe = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in metric)
    return f"best-epoch={epoch}-{safe}={score:.4g}.ckpt"

"""The performance targets, checked against figures of the same run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """One target: what it says, the figure measured, the limit, and whether it holds."""

    target: str
    measured: float
    limit: float
    unit: str = "x"
    #: True: the figure must equal the limit (a count), not merely stay under it.
    exact: bool = False

    @property
    def holds(self) -> bool:
        """True when the measured figure is within the limit (equal to it, when exact)."""
        return self.measured == self.limit if self.exact else self.measured <= self.limit

    @property
    def verdict(self) -> str:
        """``"holds"``, or by how much it misses (``"misses by 1.42x"``)."""
        if self.holds:
            return "holds"
        if self.exact:
            return f"misses: {self.measured:g} {self.unit} instead of {self.limit:g}"
        if self.limit == 0:
            return f"misses: {self.measured:g} {self.unit} where none is allowed"
        return f"misses by {self.measured / self.limit:.2f}x"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``holds`` and ``verdict``."""
        return {**asdict(self), "holds": self.holds, "verdict": self.verdict}


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` rounded for the tables (inf when the denominator is 0)."""
    return round(numerator / denominator, 3) if denominator else float("inf")

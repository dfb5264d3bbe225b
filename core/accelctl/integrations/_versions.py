"""The minor versions of a framework an integration's adaptation is tested with, one rule for
both bridges (Lightning's connectors, Accelerate's state)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class TestedRange:
    """``low <= (major, minor) < high``; pre-releases of a tested minor count as tested."""

    __test__ = False  # not a pytest test class, whatever its name

    low: tuple[int, int]
    high: tuple[int, int]

    def covers(self, version: str) -> bool:
        """True when ``version`` (``"2.6.1"``, ``"2.6.0rc1"``) is in the range."""
        match = re.match(r"(\d+)\.(\d+)", version)
        if match is None:
            return False
        return self.low <= (int(match.group(1)), int(match.group(2))) < self.high

    def text(self) -> str:
        """The range for messages and requirements: ``">=2.6,<2.7"``."""
        return f">={self.low[0]}.{self.low[1]},<{self.high[0]}.{self.high[1]}"

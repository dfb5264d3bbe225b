"""``<root_dir>/metrics.jsonl``: the Trainer's figures as JSON lines, written by rank 0 only.

Two kinds of line, told apart by ``"kind"``:

- ``"step"``, every ``log_every_n_steps`` optimizer steps: ``step`` (steps done so far, from 1),
  ``epoch`` (from 0), ``train_loss`` (mean over the steps since the previous line, across all
  processes), ``samples_per_second`` (all processes together, since the previous line) and the
  accelerator's device stats for rank 0's device, under the contract's keys
  (``memory_used_bytes``, ``utilization_percent``, ...);
- ``"epoch"``, at the end of every epoch: ``step``, ``epoch``, and the epoch's figures, the same as
  :attr:`accelctl.Trainer.metrics` (``train_loss``, ``samples_per_second``, ``val_*``).

Figures that are not finite (a diverged loss) are written as ``null``, so that every line is
strict JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

#: The file's name inside ``root_dir``.
METRICS_FILE = "metrics.jsonl"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Appends JSON lines to a file opened afresh (truncated) for one ``fit``; with ``path=None``
    (the processes other than rank 0) every call does nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        """Write ``record`` as one line, and flush it (lines are rare: logging steps only)."""
        if self._file is None:
            return
        line = json.dumps({key: _finite(value) for key, value in record.items()}, allow_nan=False)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None

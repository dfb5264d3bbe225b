"""``<root_dir>/metrics.jsonl``: the Trainer's figures as JSON lines, written by rank 0 only.

Two kinds of line, told apart by ``"kind"``:

- ``"step"``, every ``log_every_n_steps`` optimizer steps: ``step`` (steps done so far, from 1),
  ``epoch`` (from 0), ``train_loss`` (mean over the steps since the previous line, across all
  processes), ``samples_per_second`` (all processes together, since the previous line) and the
  accelerator's device stats for rank 0's device, under the contract's keys
  (``memory_used_bytes``, ``utilization_percent``, ...);
- ``"epoch"``, at the end of every epoch: ``step``, ``epoch``, and the epoch's figures, the same as
  :attr:`accelctl.Trainer.metrics` (``train_loss``, ``samples_per_second``, ``val_*``).

Every line also carries ``run`` (the launch's id under torchrun, else one per ``fit``) and
``restart`` (how many times torchrun restarted the group, 0 at first). The file is appended to,
never truncated: a resumed or repeated fit adds its lines after the earlier ones. Each line goes
out in a single ``write`` to a file opened for appending, so a kill at any moment leaves whole
lines. Figures that are not finite (a diverged loss) are written as ``null``, so that every line
is strict JSON.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The file's name inside ``root_dir``.
METRICS_FILE = "metrics.jsonl"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Appends JSON lines to ``path``, each tagged with ``run`` and ``restart``; with
    ``path=None`` (the processes other than rank 0) every call does nothing."""

    def __init__(self, path: Path | None, *, run: str = "", restart: int = 0) -> None:
        self.path = path
        self._tags = {"run": run, "restart": restart}
        self._fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # O_APPEND: every write lands at the end, whoever else appends (a kill leaves lines).
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if _ends_mid_line(path):  # a line torn by a crash elsewhere: start on a fresh one
                os.write(self._fd, b"\n")

    def write(self, record: Mapping[str, Any]) -> None:
        """Write ``record`` as one line, in one ``write`` call (unbuffered: lines are rare)."""
        if self._fd is None:
            return
        values = {**record, **self._tags}
        line = json.dumps({key: _finite(value) for key, value in values.items()}, allow_nan=False)
        os.write(self._fd, (line + "\n").encode("utf-8"))

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(0, os.SEEK_END)
        if file.tell() == 0:
            return False
        file.seek(-1, os.SEEK_END)
        return file.read(1) != b"\n"

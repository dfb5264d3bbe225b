"""``<root_dir>/metrics.jsonl``: the Trainer's figures as JSON lines.

Each line's ``"kind"`` is ``"step"`` or ``"epoch"``; written by rank 0 only (docs/training.md,
"Figures"). Appended to, never truncated, each line in a single ``write``, so a kill leaves whole
lines; non-finite figures are ``null``."""

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
    """Appends JSON lines to ``path``, each tagged with ``run`` and ``restart``.

    With ``path=None`` (the processes other than rank 0) every call does nothing."""

    def __init__(self, path: Path | None, *, run: str = "", restart: int = 0) -> None:
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

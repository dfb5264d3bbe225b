"""Reading a Trainer's ``metrics.jsonl`` back: one run's records, in step order.

For ``accelctl plot`` (:mod:`accelctl.plotting`). No torch, no matplotlib.

The file (docs/training.md, "Figures") is appended to by every fit of a ``root_dir``: each line a
JSON object tagged ``run`` (one name for every attempt of a run) and ``restart``. A run resumed
(``--max-restarts``, ``ckpt_path="last"``) goes back to its checkpoint's step and writes the steps
after it again: the later line of a step is the one that stands. A line torn by a crash is not
JSON; it is skipped and counted, never a reason to show nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._base.text import quote
from .._contract.errors import AccelctlError
from .._training.metrics_log import METRICS_FILE

#: The kinds of record that hold figures to draw.
KINDS = ("step", "epoch")


@dataclass
class RunMetrics:
    """One run's figures from a metrics file.

    :ivar path: the file read.
    :ivar run: the run's ``run`` tag.
    :ivar runs: every run of the file, in the order they first appear.
    :ivar steps: its ``"kind": "step"`` records, one per step (the latest line of each), by step.
    :ivar epochs: its ``"kind": "epoch"`` records, one per epoch (the latest), by epoch.
    :ivar resumes: ``(step, label)`` where an attempt after the first took over: ``"restart N"``
        (``--max-restarts``) or ``"resumed"`` (a fit started again from a checkpoint).
    :ivar skipped: the numbers (from 1) of the lines that are not JSON objects (a torn line).
    """

    path: Path
    run: str
    runs: list[str]
    steps: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    resumes: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)

    def series(self, key: str, kind: str = "step") -> tuple[list[int], list[float]]:
        """Return ``(steps, values)`` of ``key`` in the records of ``kind`` that have it.

        A ``null`` (a figure that was not finite) is NaN, a gap in a line."""
        records = self.steps if kind == "step" else self.epochs
        steps, values = [], []
        for record in records:
            if key in record and isinstance(record.get("step"), int):
                steps.append(record["step"])
                value = record[key]
                values.append(float(value) if _is_number(value) else math.nan)
        return steps, values

    def keys(self, kind: str = "step") -> list[str]:
        """The figures' keys that the records of ``kind`` hold, in the order first seen."""
        records = self.steps if kind == "step" else self.epochs
        return list(dict.fromkeys(key for record in records for key in record))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metrics_path(source: str | Path) -> Path:
    """Return the metrics file of ``source``.

    A file as it is, a folder's ``metrics.jsonl`` (a Trainer's ``root_dir``).

    :raises AccelctlError: neither exists.
    """
    path = Path(source)
    if path.is_dir():
        path = path / METRICS_FILE
        if not path.is_file():
            raise AccelctlError(
                f"no {METRICS_FILE} in {source}: give a Trainer's root_dir (where it writes "
                f"<root_dir>/{METRICS_FILE}) or the file itself"
            )
    elif not path.is_file():
        raise AccelctlError(
            f"{source} does not exist: give a Trainer's root_dir or its {METRICS_FILE}"
        )
    return path


def read_metrics(source: str | Path, run: str | None = None) -> RunMetrics:
    """Read the figures of ``run`` in ``source``, a metrics file or the folder that holds one.

    ``run`` defaults to the run of the file's last record; the folder is a ``root_dir``.

    :raises AccelctlError: no such file; a file without a single record of figures (empty, or
        not the Trainer's JSON lines); ``run`` not in it, naming the runs that are.
    """
    path = metrics_path(source)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise AccelctlError(f"cannot read {path}: {exc.strerror or exc}") from exc
    records: list[dict[str, Any]] = []
    skipped: list[int] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            skipped.append(number)
            continue
        if isinstance(record, dict) and record.get("kind") in KINDS:
            records.append(record)
        elif not isinstance(record, dict):
            skipped.append(number)
    if not records:
        what = (
            "is empty"
            if not any(line.strip() for line in lines)
            else f"holds no figures: none of its {len(lines)} lines is a JSON object of "
            f'"kind" "step" or "epoch", as a Trainer writes'
        )
        raise AccelctlError(f"{path} {what}; a Trainer's fit writes one line per logging step")
    runs = list(dict.fromkeys(str(record.get("run", "")) for record in records))
    chosen = str(records[-1].get("run", "")) if run is None else run  # the last record's run
    if chosen not in runs:
        raise AccelctlError(
            f"run {quote(chosen)} is not in {path}: its runs are "
            + ", ".join(quote(name) for name in runs)
        )
    mine = [record for record in records if str(record.get("run", "")) == chosen]
    return _one_run(path, chosen, runs, mine, skipped)


def _one_run(
    path: Path, run: str, runs: list[str], records: list[dict[str, Any]], skipped: list[int]
) -> RunMetrics:
    steps: dict[int, dict[str, Any]] = {}
    epochs: dict[int, dict[str, Any]] = {}
    resumes: list[tuple[int, str]] = []
    furthest, restart = -1, None
    for record in records:
        step = record.get("step")
        if not isinstance(step, int):
            continue
        tag = record.get("restart", 0)
        if record["kind"] == "step":
            if restart is not None and tag != restart:
                resumes.append((step, f"restart {tag}"))
            elif step <= furthest:
                resumes.append((step, "resumed"))
            furthest, restart = step, tag  # this attempt's furthest step
            steps[step] = record
        else:
            epochs[int(record.get("epoch", len(epochs)))] = record
    return RunMetrics(
        path=path,
        run=run,
        runs=runs,
        steps=[steps[step] for step in sorted(steps)],
        epochs=[epochs[epoch] for epoch in sorted(epochs)],
        resumes=resumes,
        skipped=skipped,
    )

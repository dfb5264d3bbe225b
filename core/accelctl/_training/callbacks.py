"""What a fit reports, and to whom: the Trainer's callbacks (docs/training.md, "Callbacks").

A fit reports at each point where it wrote a line of ``metrics.jsonl`` (a logging window's, an
epoch's) or a checkpoint, or both at once: one :class:`TrainingReport` per point, handed to
every callback's ``on_report``. Every process of a run reports at the same points, in the same
order (the windows, the epochs and the checkpoints are the same steps on every rank), so a
callback may itself wait for the others there, as ``ray.train.report`` does.

Callbacks come from two places: the Trainer's ``callbacks=`` argument, and those a framework's
bridge installs for every fit of its process (:func:`add_process_callback`; the Ray bridge's,
which reports to Ray Train, is installed in each Ray Train worker), so that a ``Trainer()`` made
with its default arguments inside a framework's worker reports there too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class TrainingReport:
    """One point of a fit: a line of ``metrics.jsonl``, a checkpoint written, or both."""

    #: ``"step"`` (a logging window, or a mid-epoch checkpoint) or ``"epoch"`` (an epoch's end).
    kind: str
    #: The epoch (from 0) and the optimizer steps taken so far.
    epoch: int
    step: int
    #: The figures of the line written here (``train_loss``, ``samples_per_second``; at an
    #: epoch's end also ``val_*``), the same on every process; {} for a checkpoint written
    #: between two lines.
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: Rank 0's device readings at this point (the plugin's ``device_stats``); {} on the other
    #: processes, and where the plugin reads none.
    device_stats: Mapping[str, int | float] = field(default_factory=dict)
    #: The ``last.ckpt`` written at this point (the same path on every process), else None.
    checkpoint: Path | None = None


@runtime_checkable
class Callback(Protocol):
    """What the Trainer calls: ``on_report`` on every process, at every point of a fit.

    ``on_report(trainer, report)``; the points are :class:`TrainingReport`'s. An
    exception it raises stops the fit, as one of ``training_step`` does."""

    def on_report(self, trainer: Any, report: TrainingReport) -> None: ...


_process_callbacks: list[Callback] = []


def add_process_callback(callback: Callback) -> None:
    """Report every fit of this process to ``callback`` too, after the Trainer's own.

    A bridge installs its framework's reporter in the framework's worker processes."""
    if callback not in _process_callbacks:
        _process_callbacks.append(callback)


def remove_process_callback(callback: Callback) -> None:
    """Undo :func:`add_process_callback` (nothing when it was not added)."""
    if callback in _process_callbacks:
        _process_callbacks.remove(callback)


def check_callbacks(callbacks: Iterable[Any] | None) -> tuple[Callback, ...]:
    """The Trainer's ``callbacks=`` argument as a tuple.

    :raises TypeError: naming each one that has no ``on_report`` method.
    """
    if callbacks is None:
        return ()
    if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable):
        raise TypeError(
            f"callbacks must be a list of objects with an on_report(trainer, report) method, "
            f"got {type(callbacks).__name__}"
        )
    given = tuple(callbacks)
    wrong = [f"{index}: {type(c).__name__}" for index, c in enumerate(given)
             if not callable(getattr(c, "on_report", None))]  # fmt: skip
    if wrong:
        raise TypeError(
            f"callbacks must each have an on_report(trainer, report) method; these have none: "
            f"{', '.join(wrong)}"
        )
    return given


class Reporting:
    """A fit's side: collects what each point wrote, and reports it once the point is done."""

    def __init__(self, trainer: Any, callbacks: tuple[Callback, ...]) -> None:
        self.trainer = trainer
        self.callbacks = (*callbacks, *_process_callbacks)
        self._line: tuple[str, Mapping[str, float], Mapping[str, int | float]] | None = None
        self._checkpoint: Path | None = None

    @property
    def wanted(self) -> bool:
        """Whether anyone listens (the fit reads extra device stats only then)."""
        return bool(self.callbacks)

    def line(
        self, kind: str, metrics: Mapping[str, float], device_stats: Mapping[str, int | float]
    ) -> None:
        """A line of ``metrics.jsonl`` was written at this point."""
        self._line = (kind, dict(metrics), dict(device_stats))

    def checkpoint(self, path: Path) -> None:
        """``path`` was written at this point."""
        self._checkpoint = path

    def done(self, epoch: int) -> None:
        """Report what the point wrote to every callback, now that it is over.

        Nothing is reported when it wrote nothing."""
        line, checkpoint = self._line, self._checkpoint
        self._line = self._checkpoint = None
        if line is None and checkpoint is None:
            return
        kind, metrics, stats = line if line is not None else ("step", {}, {})
        report = TrainingReport(kind, epoch, self.trainer.global_step, metrics, stats, checkpoint)
        for callback in self.callbacks:
            callback.on_report(self.trainer, report)

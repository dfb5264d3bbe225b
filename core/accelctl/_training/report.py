"""The fit's log for people: one line per event, written by rank 0.

Through the ``accelctl.trainer`` logger, whether or not a terminal is attached (docs/training.md,
"The log").

What it runs on, where its checkpoints go, what it resumed from, each epoch's figures, each
checkpoint written, and why it stopped. ``enable_progress_bar`` governs the bar only. Where the
program configured no logging, the ``accelctl`` logger writes to standard error itself, at INFO;
where it did (``logging.basicConfig``, a framework), the lines go where it said, at the levels it
allows, as Lightning's do.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: The logger of the Trainer's lines; the handler accelctl adds sits on its parent.
LOGGER = logging.getLogger("accelctl.trainer")
_PARENT = logging.getLogger("accelctl")


class _StandardError(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is at each line (a test's capture, a redirected stream)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("accelctl: %(message)s"))

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # logging.StreamHandler.__init__ sets it
        pass


def make_visible() -> None:
    """Give the ``accelctl`` logger a handler to standard error, unless logging is configured.

    At INFO. Configured: a handler on the root logger or on ``accelctl``."""
    if _PARENT.handlers or logging.getLogger().handlers:
        return
    _PARENT.addHandler(_StandardError())
    _PARENT.propagate = False  # a later basicConfig would print each line twice
    if _PARENT.level == logging.NOTSET:
        _PARENT.setLevel(logging.INFO)


def figures_text(figures: Mapping[str, float]) -> str:
    """``train_loss 0.6931, val_accuracy 0.5, 1234 samples/s``."""
    parts = [
        f"{key} {_number(value)}" for key, value in figures.items() if key != "samples_per_second"
    ]
    if "samples_per_second" in figures:
        parts.append(f"{_number(figures['samples_per_second'])} samples/s")
    return ", ".join(parts)


def _number(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


class FitReport:
    """The lines of one fit; every method does nothing where ``enabled`` is False (ranks but 0)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        if enabled:
            make_visible()

    def _line(self, message: str, level: int = logging.INFO) -> None:
        if self.enabled:
            LOGGER.log(level, message)

    def started(
        self,
        *,
        accelerator: str,
        devices: Sequence[torch.device],
        strategy: str,
        precision: str,
        world_size: int,
        nodes: int,
    ) -> None:
        shown = ", ".join(str(device) for device in devices)
        processes = f"{world_size} processes" if world_size > 1 else "1 process"
        if nodes > 1:
            processes += f" on {nodes} machines"
        self._line(
            f"training on {accelerator}: devices {shown}, {processes}, strategy {strategy}, "
            f"precision {precision}"
        )

    def writing(self, *, run: str | None, folder: Path | None, metrics: Path, when: str) -> None:
        where = f"checkpoints in {folder} ({when})" if folder is not None else "no checkpoints"
        prefix = f"run {run}: " if run else ""
        self._line(f"{prefix}{where}; figures in {metrics}")

    def resumed(
        self, path: Path, *, epoch: int, batches_done: int, step: int, max_epochs: int
    ) -> None:
        at = f"the start of epoch {epoch + 1}"
        if batches_done:
            at = f"epoch {epoch + 1} after {batches_done} batches"
        self._line(f"resumed from {path.resolve()}: {at} of {max_epochs}, step {step}")

    def nothing_to_train(self, path: Path, *, epochs_done: int, max_epochs: int) -> None:
        self._line(
            f"nothing to train: {path.resolve()} was written at the end of epoch {epochs_done} "
            f"and max_epochs={max_epochs}; give a larger max_epochs to train on",
            logging.WARNING,
        )

    def epoch(self, epoch: int, max_epochs: int, step: int, figures: Mapping[str, float]) -> None:
        self._line(f"epoch {epoch + 1}/{max_epochs} (step {step}): {figures_text(figures)}")

    def checkpoint(self, path: Path, *, epoch: int, step: int, best: Path | None = None) -> None:
        also = f"; kept as a best one: {best.name}" if best is not None else ""
        self._line(f"checkpoint written: {path} (epoch {epoch + 1}, step {step}){also}")

    def finished(self, *, max_epochs: int, step: int) -> None:
        self._line(f"stopped: max_epochs={max_epochs} reached, step {step}")

    def failed(self, exc: BaseException, at: tuple[int, int] | None, *, last: str) -> None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        what = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        also = f"; {last}" if last else ""
        self._line(f"stopped by an error {_where(at)}: {what}{also}", logging.ERROR)

    def stopped_at(self, at: tuple[int, int] | None, *, last: str) -> None:
        """A stop whose error is shown on its own (accelctl's): where, and the checkpoint."""
        self._line(f"stopped {_where(at)}; {last}", logging.WARNING)

    def interrupted(self, at: tuple[int, int] | None, *, last: str) -> None:
        self._line(f"interrupted (Ctrl-C) {_where(at)}; {last}", logging.WARNING)


def _where(at: tuple[int, int] | None) -> str:
    """Say where in the fit it stopped, for a log line.

    ``in epoch 2, step 40`` (``at``: the epoch from 0 and the step), or ``before its first
    step ended`` where the fit ran none (``at`` None: it stopped while setting up, or in its
    first step)."""
    if at is None:
        return "before its first step ended"
    epoch, step = at
    return f"in epoch {epoch + 1}, step {step}"

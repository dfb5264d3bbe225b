"""Stopping a fit at a checkpoint on a signal, and requeueing its SLURM job to resume it.

See docs/training.md, "Requeue". With several processes the request rides on the next logging
step's all-reduce of the figures, so that all stop at the same step at no cost of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from .._contract.errors import TrainerError

#: What ``requeue_signal="auto"`` catches inside a SLURM job: what ``sbatch --signal`` sends.
AUTO_SIGNAL = signal.SIGUSR1


class RequeueError(TrainerError):
    """The fit stopped at a checkpoint on its signal, but its job could not be requeued."""


class RequeueSignal(NamedTuple):
    """The signal a fit catches to stop at a checkpoint, as the Trainer's argument chose it."""

    #: None: none is caught.
    signum: int | None
    #: Named by the user (caught even over another handler), not chosen by ``"auto"``.
    explicit: bool


def parse_requeue_signal(
    value: Any, *, checkpointing: bool, environ: Mapping[str, str] = os.environ
) -> RequeueSignal:
    """Return the signal to catch, and whether it was named.

    ``"auto"``: SIGUSR1 inside a SLURM job that writes checkpoints, unless something else handles it
    when ``fit`` starts; None: never. Raises :class:`TrainerError` for what cannot be caught, or a
    signal with checkpoints off."""
    if value is None or value is False:
        return RequeueSignal(None, False)
    if isinstance(value, str) and value.strip().lower() == "auto":
        in_job = checkpointing and "SLURM_JOB_ID" in environ
        return RequeueSignal(AUTO_SIGNAL if in_job else None, False)
    signum: signal.Signals | None = None
    with contextlib.suppress(KeyError, ValueError):
        if isinstance(value, str):
            name = value.strip().upper()
            signum = signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        elif isinstance(value, int) and not isinstance(value, bool):
            signum = signal.Signals(value)
    if signum is None or signum in (signal.SIGKILL, signal.SIGSTOP):
        raise TrainerError(
            f"requeue_signal={value!r} is not a signal that can be caught: give a name such as "
            f'"SIGUSR1" (what sbatch --signal=USR1@90 sends), a number, "auto" or None'
        )
    if not checkpointing:
        raise TrainerError(
            f"requeue_signal={value!r} stops the fit at a checkpoint, but enable_checkpointing is "
            f"False: turn checkpoints on, or pass requeue_signal=None"
        )
    return RequeueSignal(int(signum), True)


class RequeueOnSignal:
    """The signal handler of one ``fit``: notes the signal so the loop stops at a step boundary.

    Main thread only, Python's rule. ``"auto"`` leaves a handler of someone else's."""

    def __init__(self, signum: int | None, explicit: bool) -> None:
        self.signum, self.requested = signum or 0, False
        self._previous: Any = None
        self.armed = (
            signum is not None
            and threading.current_thread() is threading.main_thread()
            and (explicit or signal.getsignal(signum) == signal.SIG_DFL)
        )

    def arm(self) -> None:
        if self.armed:
            self._previous = signal.signal(self.signum, self._note)

    def disarm(self) -> None:
        if self._previous is not None:
            signal.signal(self.signum, self._previous)
            self._previous = None

    def _note(self, signum: int, frame: object) -> None:
        self.requested = True

    def leave(self, *, rank: int, world_size: int, step: int, checkpoint: Path) -> NoReturn:
        """Requeue the job (rank 0) and exit, after the checkpoint.

        Every process exits. Raises :class:`RequeueError` in rank 0 when ``scontrol requeue``
        failed."""
        said = f"{signal.Signals(self.signum).name} received: checkpoint written at step {step}"
        said += f" ({checkpoint})"
        if world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # the checkpoint is complete before anything is requeued
        job = os.environ.get("SLURM_JOB_ID")
        if job is None:  # a signal named outside SLURM: stop with the signal's status
            if rank == 0:
                again = "run again with fit(ckpt_path='last') to resume"
                print(f"accelctl: {said}; not in a SLURM job, so nothing requeues it: {again}",
                      file=sys.stderr, flush=True)  # fmt: skip
            raise SystemExit(128 + self.signum)
        # Once requeued, SLURM stops the job's processes with SIGTERM: these are leaving anyway.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if rank == 0:
            try:
                done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
                failed = done.returncode != 0 and (done.stderr or done.stdout).strip()
            except OSError as exc:
                failed = str(exc)
            if failed:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                raise RequeueError(
                    f"{said}, but `scontrol requeue {job}` failed: {failed}. Resume from it with "
                    f"fit(ckpt_path='last') in a new job (sbatch --requeue lets SLURM requeue it)"
                )
            print(f"accelctl: {said}; SLURM job {job} requeued, it resumes from there",
                  file=sys.stderr, flush=True)  # fmt: skip
        raise SystemExit(0)

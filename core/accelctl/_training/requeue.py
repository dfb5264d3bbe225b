"""Stopping a fit at a checkpoint on a signal, and requeueing its SLURM job to resume it.

A batch job warned that its time is nearly up (``sbatch --signal=USR1@90``) or that it is being
preempted gets a signal. ``Trainer(requeue_signal=...)`` catches it: the fit ends the step it is
in, writes ``last.ckpt``, asks SLURM to requeue the job (``scontrol requeue $SLURM_JOB_ID``, from
rank 0) and the process exits with status 0. The requeued job runs the same script again with
``SLURM_RESTART_COUNT`` above 0, and ``fit`` resumes from ``last.ckpt`` by itself.

With several processes all of them must stop at the same step (the checkpoint is a collective).
The request rides on the next logging step's all-reduce of the figures (every
``log_every_n_steps``), which every process makes anyway: stopping costs no collective of its own.
Alone, the fit stops after the step in which the signal came.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from .._errors import TrainerError

#: What ``requeue_signal="auto"`` catches inside a SLURM job: the signal ``sbatch --signal``
#: sends unless told another.
AUTO_SIGNAL = signal.SIGUSR1


class RequeueError(TrainerError):
    """The fit stopped at a checkpoint on its signal, but its job could not be requeued."""


def parse_requeue_signal(
    value: Any, *, checkpointing: bool, environ: Mapping[str, str] = os.environ
) -> tuple[int | None, bool]:
    """The signal to catch and whether it was asked for by name (``"auto"`` is not).

    ``"auto"``: SIGUSR1 inside a SLURM job (``SLURM_JOB_ID``) that writes checkpoints, and only
    when nothing else handles SIGUSR1 when ``fit`` starts; None: never.

    :raises TrainerError: for a name that is not a signal that can be caught, or a signal asked
        for with checkpoints off (there would be nothing to resume from).
    """
    if value is None or value is False:
        return None, False
    if isinstance(value, str) and value.strip().lower() == "auto":
        return (AUTO_SIGNAL if checkpointing and "SLURM_JOB_ID" in environ else None), False
    name = value.strip().upper() if isinstance(value, str) else value
    try:
        signum = signal.Signals(name) if isinstance(name, int) else signal.Signals[name]
    except (KeyError, ValueError):
        try:
            signum = signal.Signals[f"SIG{name}"]
        except (KeyError, TypeError):
            signum = None
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
    return int(signum), True


class RequeueOnSignal:
    """The handler of one ``fit``: notes the signal; the training loop stops at a step boundary.

    Installed from the main thread only (Python's rule for signal handlers); ``"auto"`` leaves a
    handler someone else installed alone.
    """

    def __init__(self, signum: int | None, explicit: bool) -> None:
        self.signum, self.explicit = signum, explicit
        #: True once the signal came.
        self.requested = False
        self._previous: Any = None
        self.armed = (
            signum is not None
            and threading.current_thread() is threading.main_thread()
            and (explicit or signal.getsignal(signum) == signal.SIG_DFL)
        )

    def arm(self) -> None:
        if self.armed and self.signum is not None:
            self._previous = signal.signal(self.signum, self._note)

    def disarm(self) -> None:
        if self.armed and self.signum is not None and self._previous is not None:
            signal.signal(self.signum, self._previous)
            self._previous = None

    def _note(self, signum: int, frame: object) -> None:
        self.requested = True

    def leave(
        self, *, rank: int, world_size: int, step: int, checkpoint: Path, environ: Mapping[str, str]
    ) -> NoReturn:
        """After the checkpoint, on every process: requeue the job (rank 0) and exit.

        :raises RequeueError: in rank 0 when ``scontrol requeue`` failed.
        """
        name = signal.Signals(self.signum or 0).name
        if world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # the checkpoint is complete before anything is requeued
        job = environ.get("SLURM_JOB_ID")
        if job is None:  # asked for by name outside SLURM: stop, with the signal's status
            if rank == 0:
                print(
                    f"accelctl: {name} received: checkpoint written at step {step} "
                    f"({checkpoint}); not in a SLURM job, so nothing requeues it: run again "
                    f"with fit(ckpt_path='last') to resume",
                    file=sys.stderr,
                    flush=True,
                )
            raise SystemExit(128 + (self.signum or 0))
        # Once requeued, SLURM stops the job's processes with SIGTERM: these are leaving anyway.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if rank == 0:
            try:
                done = subprocess.run(
                    ["scontrol", "requeue", job], capture_output=True, text=True, timeout=120
                )
                failed = done.returncode != 0 and (done.stderr or done.stdout).strip()
            except (OSError, subprocess.TimeoutExpired) as exc:
                failed = str(exc)
            if failed:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                raise RequeueError(
                    f"{name} received: checkpoint written at step {step} ({checkpoint}), but "
                    f"`scontrol requeue {job}` failed: {failed}. Resume from it with "
                    f"fit(ckpt_path='last') in a new job (sbatch --requeue lets SLURM requeue it)"
                )
            print(
                f"accelctl: {name} received: checkpoint written at step {step} ({checkpoint}); "
                f"SLURM job {job} requeued, it resumes from there",
                file=sys.stderr,
                flush=True,
            )
        raise SystemExit(0)

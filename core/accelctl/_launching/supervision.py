"""Launched processes stay under their launcher: they die with it, and its signals stop them.

See docs/training.md, "Supervision". In each child :func:`die_with_launcher` (torchrun puts workers
in sessions of their own, so a SIGKILLed launcher would leave them training); in the launcher
:func:`wait_forwarding_signals` and :func:`forwarding_user_signals` (a scheduler's warning). Linux's
death signal comes when the launcher's *thread* that started the child ends: accelctl starts
children from its main thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from .._contract import settings
from .._contract.errors import AccelctlError

if TYPE_CHECKING:
    import subprocess

#: The launcher's process id, handed to its children.
ENV_LAUNCHER_PID = settings.LAUNCHER_PID
#: Linux's ``PR_SET_PDEATHSIG`` (``<sys/prctl.h>``).
_PR_SET_PDEATHSIG = 1
#: Seconds a child gets to stop after each signal before the next, stronger one.
GRACE_S = 3.0


class LaunchInterruptedError(AccelctlError):
    """The launcher was told to stop (Ctrl-C, SIGTERM); its processes were stopped.

    :param resume: what the launched Trainer's last checkpoint is and how to resume from it
        (one clause, :func:`accelctl._launching.scripts.resume_clause`), when it wrote one.
    :param processes: where the launched processes were when the signal came, in words
        (:data:`STOPPED`, :data:`NOT_STARTED`, :data:`ENDED`).
    """

    #: What the message says of the launched processes.
    STOPPED = "; the launched processes were stopped"
    NOT_STARTED = " before any process was started"
    ENDED = " after the launched processes had ended"

    def __init__(self, signum: int, resume: str | None = None, processes: str = STOPPED) -> None:
        name = signal.Signals(signum).name
        how = "Ctrl-C" if signum == signal.SIGINT else name
        message = f"interrupted by {how}{processes}"
        super().__init__(f"{message}; {resume}" if resume else message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """``128 + signal``, as a shell reports a process ended by it (130 for Ctrl-C)."""
        return 128 + self.signum


def launcher_environment() -> dict[str, str]:
    """Return the variables that tell children who their launcher is and which launch they are in.

    A new launch id at each call: the processes of a launch's restarts keep it, and continue the run
    folder their Trainer wrote (docs/training.md, "Runs and their folders")."""
    import uuid

    return {ENV_LAUNCHER_PID: str(os.getpid()), settings.LAUNCH_ID: uuid.uuid4().hex}


def die_with_launcher(environ: Mapping[str, str] = os.environ) -> str | None:
    """End this launched child when its launcher dies.

    The launcher is named by ``ACCELCTL_LAUNCHER_PID``; ``prctl(PR_SET_PDEATHSIG)``, or a thread
    watching the parent where there is none. Returns how (``"pdeathsig"``, ``"watchdog"``), or None
    when not launched by accelctl."""
    launcher = settings.launcher_pid(environ)
    if launcher is None:
        return None
    if os.getppid() != launcher:
        # Either the launcher died before this line (then the parent is init or a subreaper),
        # or a grandchild inherited the variable: only a direct child is supervised.
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), signal.SIGKILL)
        except PermissionError:  # alive, someone else's
            pass
        return None
    if sys.platform.startswith("linux") and _set_parent_death_signal(signal.SIGKILL):
        # The launcher may have died between the check above and prctl: check again.
        if os.getppid() != launcher:
            os.kill(os.getpid(), signal.SIGKILL)
        return "pdeathsig"
    threading.Thread(
        target=_watch_parent, args=(launcher,), name="accelctl-launcher-watchdog", daemon=True
    ).start()
    return "watchdog"


def _set_parent_death_signal(signum: int) -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(launcher: int, period: float = 1.0) -> None:
    while os.getppid() == launcher:
        time.sleep(period)
    os.kill(os.getpid(), signal.SIGKILL)


def wait_forwarding_signals(process: subprocess.Popen[bytes], grace: float = GRACE_S) -> int:
    """Wait for ``process``, forwarding SIGINT and SIGTERM, and return its exit status.

    On SIGINT or SIGTERM to this process, pass the signal on after a short pause (on a terminal
    Ctrl-C reached it already), then SIGTERM and SIGKILL ``grace`` seconds apart, and raise
    :class:`LaunchInterruptedError` once it has ended."""
    received: list[int] = []

    def note(signum: int, frame: object) -> None:
        received.append(signum)

    with _handling((signal.SIGINT, signal.SIGTERM), note):
        while not received:
            status = _wait(process, 0.5)  # short waits: a handler runs between them
            if status is not None:
                return status
        first = received[0]
        steps = [(min(1.0, grace), first), (grace, signal.SIGTERM), (grace, signal.SIGKILL)]
        for pause, signum in steps:
            if _wait(process, pause) is not None:
                break
            process.send_signal(signum)  # nothing when it has ended meanwhile
        process.wait()
        raise LaunchInterruptedError(first)


def _wait(process: subprocess.Popen[bytes], seconds: float) -> int | None:
    import subprocess

    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


#: Signals a launcher passes on to its processes rather than ending on them.
USER_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def forwarding_user_signals() -> contextlib.AbstractContextManager[None]:
    """Send SIGUSR1 and SIGUSR2 on to this process's children, while in force.

    The children are read from Linux's ``/proc``; elsewhere ignored. Under SLURM a worker may get
    one twice: from SLURM and from its launcher."""

    def forward(signum: int, frame: object) -> None:
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    return _handling(USER_SIGNALS, forward)


@contextlib.contextmanager
def _handling(signums: Iterable[int], handler: Callable[[int, object], None]) -> Iterator[None]:
    """``handler`` for ``signums`` while in force, then the previous handlers again.

    Python sets handlers from the main thread only: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, replaced in previous.items():
            signal.signal(signum, replaced)


def _children() -> list[int]:
    """This process's children, from Linux's ``/proc`` (none elsewhere)."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The fields after the command, which is in parentheses and may hold anything.
            with open(f"/proc/{entry}/stat") as file:
                if entry.isdigit() and int(file.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.append(int(entry))
    return found

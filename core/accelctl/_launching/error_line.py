"""accelctl's error that ends a program, shown as one line on standard error, not a traceback.

Where accelctl runs a user's script (its Trainer, a bridge's constructor or step), an
:class:`~accelctl.AccelctlError` that leaves it installs :func:`show_as_one_line`: should the
error end the program, Python's hook shows ``accelctl: <the error>`` instead of the traceback
(``ACCELCTL_DEBUG=1``: the traceback as well). Of a launch's processes, rank 0 alone shows it
(its rank read from the launcher's variables as the Trainer reads them, or the bridge's own);
under ``accelctl launch`` the child records the error instead (:mod:`accelctl._launching.child`)
and the launcher shows it, once: its line is the message's first, and the process prints the
lines after it (a hang's stacks) above it. A Ctrl-C the fit already reported (:func:`reported`)
ends without a word more. Other errors are shown as before.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from .._base.text import printable_line
from .._contract import settings
from .._contract.errors import AccelctlError
from .._contract.kernel_error import DEBUG_SWITCH, MissingKernelError

P = ParamSpec("P")
R = TypeVar("R")

#: A function that finds the error a framework's own error carries (Ray's, from its workers).
Carrier = Callable[[BaseException], AccelctlError | None]

#: What the hook shows: nothing at all in a process whose launch shows the line in another one,
#: and the errors the carriers find.
_quiet = False
_carriers: list[Carrier] = []
#: The attribute that marks a Ctrl-C a fit reported in its log (its traceback would say it
#: again): on the exception itself, so that nothing here keeps its frames alive (a notebook's).
REPORTED = "_accelctl_reported"


def show_as_one_line(*, quiet: bool | None = None, carried: Carrier | None = None) -> None:
    """Show an :class:`~accelctl.AccelctlError` that ends this program as accelctl's one line.

    From now on, on standard error (a :class:`~accelctl.MissingKernelError`'s ways out
    written as the command line that ran it; ``ACCELCTL_DEBUG=1``: Python's traceback as well).
    Other errors are shown as before.

    :param quiet: from now on this process ends on one without a word: its launch shows the
        line in another process (rank 0). None: quiet where the launcher's variables say this
        process's rank is not 0, read as the Trainer reads them (torchrun's ``RANK``, set by
        ``accelerate launch`` too; ``mpirun``'s; a SLURM job step's).
    :param carried: from now on, also the error this finds in a framework's own error (Ray's
        ``WorkerGroupError``, which carries its workers' errors); None where there is none.
    """
    global _quiet
    if quiet is None:
        quiet = _launched_rank() != 0
    _quiet = _quiet or quiet
    if carried is not None and carried not in _carriers:
        _carriers.append(carried)
    previous = sys.excepthook
    if getattr(previous, "_accelctl_one_line", False):
        return

    def one_line(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if getattr(value, REPORTED, False):
            if settings.debug():
                previous(kind, value, tb)
            return
        error = shown(value)
        if error is None:
            previous(kind, value, tb)
            return
        if settings.debug():
            previous(kind, value, tb)
        if not _quiet:
            sys.stderr.write(f"accelctl: {line_for(error, command_line())}\n")
            sys.stderr.flush()

    one_line._accelctl_one_line = True  # type: ignore[attr-defined]
    sys.excepthook = one_line


def _launched_rank() -> int:
    """This process's rank as its launcher set it (0 alone, or where the variables are bad)."""
    from .._choice.process_environment import ProcessEnvironment

    try:
        return ProcessEnvironment.from_environ(os.environ).rank
    except AccelctlError:  # a variable that is not a number: the Trainer says so, not this
        return 0


def reported(interrupt: BaseException) -> None:
    """Mark ``interrupt`` as reported by accelctl's own line.

    ``interrupt`` is a Ctrl-C. Should it end the program, no traceback follows
    (``ACCELCTL_DEBUG=1``: it does); Python still ends by SIGINT (a shell shows 130)."""
    setattr(interrupt, REPORTED, True)
    show_as_one_line()


def shown(value: BaseException) -> AccelctlError | None:
    """The error the one line shows for ``value``; None where it shows none."""
    if isinstance(value, AccelctlError):
        return value
    for carrier in _carriers:
        try:
            found = carrier(value)
        except Exception:  # a carrier that breaks leaves Python's own report of the error
            found = None
        if found is not None:
            return found
    return None


def line_for(error: AccelctlError, argv: Sequence[str]) -> str:
    """Return the line that shows ``error``, which ended the program ``argv`` ran.

    Without ``accelctl:``: its message and the switch that shows more; a message of several lines
    keeps them (a command to run, a hang's stacks), the switch on a line of its own after them."""
    if isinstance(error, MissingKernelError) and error.op is not None:
        return error.for_command(argv)
    lines = _lines(error) or [type(error).__name__]
    if len(lines) == 1:
        return f"{lines[0]} ({DEBUG_SWITCH} shows the traceback)"
    return "\n".join([*lines, f"({DEBUG_SWITCH} shows the traceback)"])


def message_line(error: BaseException) -> str:
    """The first line of ``error``'s message, printable (its class's name where it has none)."""
    lines = _lines(error)
    return lines[0] if lines else type(error).__name__


def details(error: BaseException) -> list[str]:
    """Return the lines of ``error``'s message after its first.

    Such as a hang's stacks of every rank. Under ``accelctl launch`` the process that raised it
    prints them, above the launcher's line."""
    return _lines(error)[1:]


def one_line_when_raised(function: Callable[P, R]) -> Callable[P, R]:
    """Wrap ``function`` so that an accelctl error it raises is shown as accelctl's line.

    Should it end the program (:func:`show_as_one_line`). For the constructors whose
    refusals a script meets first (``accelctl.Trainer``, a bridge's ``Accelerator``)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except AccelctlError:
            show_as_one_line()
            raise

    return wrapper


def _lines(error: BaseException) -> list[str]:
    return [printable_line(line) for line in str(error).strip().splitlines() if line.strip()]


def command_line() -> list[str]:
    """The command line that started this process, as typed (``python train.py --epochs 3``)."""
    return list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])

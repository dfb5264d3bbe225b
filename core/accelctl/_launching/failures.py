"""Which launched process failed, and why.

The report a failed launch raises, read from the error files of torchrun's ``ChildFailedError``
(:meth:`RankFailure.from_child_failed`)."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._contract.errors import AccelctlError
from .._contract.kernel_error import MissingKernelError

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

#: The variable torchrun's error handler writes a failing child's exception to.
ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
#: The key of that record's ``extraInfo`` under which a child puts a missing kernel's parts.
ERROR_PARTS = "accelctl_missing_kernel"
#: The key under which a child puts the message of the accelctl error it raised (one line).
ERROR_LINE = "accelctl_error"


class LaunchFailedError(AccelctlError):
    """A launched process failed; the others were stopped.

    ``str(error)`` is one line naming the process and its error; :attr:`traceback` that process's
    own, when it raised."""

    __module__ = "accelctl.launcher"  # its public home, as tracebacks and pickles name it

    def __init__(self, message: str = "", *, failure: RankFailure | None = None) -> None:
        super().__init__(message)
        #: The failed process, when known (None for an error raised from a message alone).
        self.failure = failure

    @property
    def exit_code(self) -> int:
        """The failure's :attr:`RankFailure.exit_code` (1 when the failure is not known)."""
        return self.failure.exit_code if self.failure is not None else 1

    @property
    def traceback(self) -> str | None:
        """The failing process's traceback, when it raised a Python exception."""
        return self.failure.traceback if self.failure is not None else None


@dataclass(frozen=True)
class RankFailure:
    """The first process of a launch that failed (the root cause; the others were stopped)."""

    rank: int
    world_size: int
    #: The child's raw status, as ``subprocess`` reports it (``-N``: killed by signal ``N``).
    returncode: int
    #: ``"ValueError: boom"`` when the child raised, else a sentence about the exit.
    error: str
    traceback: str | None = None
    #: The parts of a :class:`~accelctl.MissingKernelError` the child raised, where it did.
    missing_kernel: Mapping[str, Any] | None = None
    #: The message of the :class:`~accelctl.AccelctlError` the child raised, where it did: the
    #: launch's one line (the child printed no traceback).
    accelctl_error: str | None = None

    def missing_kernel_error(self) -> MissingKernelError | None:
        """The child's :class:`~accelctl.MissingKernelError`, where it raised one."""
        if self.missing_kernel is None:
            return None
        return MissingKernelError.from_parts(self.missing_kernel)

    @property
    def exit_code(self) -> int:
        """Return the status ``accelctl launch`` exits with, never 0.

        The child's own, ``128 + N`` for signal ``N``, never 0."""
        if self.returncode < 0:
            return 128 - self.returncode
        return self.returncode or 1

    def describe(self, what: str | None = None) -> str:
        """Describe the failure in one line.

        ``"rank 1 of 2 failed (exit code 1): ValueError: boom"`` (the error's first line: the child
        printed the rest with its traceback)."""
        who = what or f"rank {self.rank} of {self.world_size}"
        first = self.error.strip().splitlines()[0] if self.error.strip() else self.error
        return f"{who} failed ({self._status()}): {first}"

    def _status(self) -> str:
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exit code {self.returncode}"

    @classmethod
    def from_process_failure(
        cls, rank: int, world_size: int, failure: ProcessFailure
    ) -> RankFailure:
        """Read torch's record of a failed child (its error file, when it wrote one)."""
        message, traceback, error = failure.message, None, ""
        parts, line = None, None
        if isinstance(message, Mapping):  # written by torch's error handler: the exception
            extra = message.get("extraInfo", {})
            traceback = extra.get("py_callstack") or None
            error = str(message.get("message", "")).strip()
            parts = extra.get(ERROR_PARTS) if isinstance(extra.get(ERROR_PARTS), Mapping) else None
            line = extra.get(ERROR_LINE) if isinstance(extra.get(ERROR_LINE), str) else None
        if not error:
            error = (
                "no Python exception was recorded; see its output above"
                if failure.exitcode >= 0
                else "stopped by a signal (out of memory? killed by the system?)"
            )
        return cls(rank, world_size, failure.exitcode, error, traceback, parts, line)

    @classmethod
    def from_child_failed(cls, exc: ChildFailedError, world_size: int) -> RankFailure:
        """The root cause of torchrun's ``ChildFailedError``: the first process that failed.

        torch's agent records the failed processes, then SIGTERMs and records the others. Blamed
        first: a process that failed by itself over one stopped (a SIGKILLed rank writes no error
        file, its survivor does: "Connection closed by peer"); then any error over a lost peer;
        then the error file's time in nanoseconds (the crashing rank writes first), else torch's.
        """
        detected = list(exc.failures)  # in the order torch's agent recorded them

        def blame(item: tuple[int, ProcessFailure]) -> tuple[bool, bool, int, int]:
            rank, failure = item
            stopped = failure.exitcode == -signal.SIGTERM and detected.index(rank) > 0
            message = failure.message
            text = str(message.get("message", "")) if isinstance(message, Mapping) else str(message)
            lost_peer = any(marker in text.lower() for marker in _PEER_LOST)
            try:
                when = os.stat(failure.error_file).st_mtime_ns
            except OSError:  # no error file (a signal, sys.exit): torch's own timestamp
                when = failure.timestamp * 1_000_000_000
            return stopped, lost_peer, when, rank

        rank, failure = min(exc.failures.items(), key=blame)
        return cls.from_process_failure(rank, world_size, failure)


#: What the communication libraries say when a process's peer died (gloo, NCCL, the store).
_PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote worker crash",
    "remote process exited",
)

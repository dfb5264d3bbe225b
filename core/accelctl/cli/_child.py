"""The plugins that CLI commands ask are asked in a forked child process.

The commands are ``list``, ``stats``, ``env`` and ``resolve``. Nothing a plugin does to a process
(``os._exit``, a crash in native code, a write on descriptor 1) reaches the command's own: it stays
a row with its cause.

The child runs the command's task (plain data out: rows, readings, a selection) and streams
to the parent, over a pipe, each result, what the child's code writes on ``sys.stdout`` and
``sys.stderr`` (the parent writes it on its stderr), and, from the fan-out's
:class:`~accelctl._host.fanout.Policy`, which plugins it is asking. Its descriptor 1 is its
descriptor 2, so a plugin's output never reaches the command's stdout, however it writes.
Where the child ends before its task did, the one plugin it was asking is named with how the
process ended, and a new child runs the task without asking it again; where it was asking
several, the next child asks one at a time to find which. Nothing is replaced in the command's
own process.

The child is forked only from a process that runs one thread, as the ``accelctl`` command does
when it gets here: a fork copies the locks other threads hold, never released in the child.
Where ``os.fork`` does not exist (Windows), or where the command runs inside a program that
has other threads (a test runner, a notebook calling the CLI's functions), the task runs in
the process itself (docs/design/plugins-asked-in-a-child.md).
"""

from __future__ import annotations

import dataclasses
import io
import marshal
import os
import signal
import struct
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, NoReturn, TypeVar

from .._base.problem import Problem
from .._contract.errors import AccelctlError
from .._host import fanout

T = TypeVar("T")

_HEADER = struct.Struct("!I")
#: Whether tasks may run in a forked child: False where ``os.fork`` does not exist (Windows), and
#: in tests of what a task computes (not of where). A process with other threads never forks.
FORK = hasattr(os, "fork")
#: True once a task ran in a child: the plugins' code ran there, not in this process (what
#: ``accelctl.cli.main`` needs to know to skip the shutdown's garbage collection).
asked_in_child = False


def _dumps(message: tuple[Any, ...]) -> bytes:
    """Serialise a message to bytes.

    Plain data (``list``'s rows, text, names) through ``marshal``, which is built in, anything else
    (a selection's objects, an error) through ``pickle``, imported then: ``list`` never pays
    pickle's import (a few ms of a 100 ms command)."""
    try:
        return b"m" + marshal.dumps(message)
    except ValueError:  # an object marshal does not take
        import pickle

        return b"p" + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def _loads(data: bytes) -> Any:
    """Load what :func:`_dumps` made.

    It comes from this interpreter's own child: marshal's format is the same on both ends."""
    if data[:1] == b"m":
        return marshal.loads(data[1:])
    import pickle

    return pickle.loads(data[1:])


class _Pipe:
    """The child's end of the pipe: length-prefixed messages, one whole message per call.

    Messages are :func:`_dumps`'s; called from any thread."""

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor
        self.lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        data = _dumps(message)
        view = memoryview(_HEADER.pack(len(data)) + data)
        with self.lock:
            while view:
                view = view[os.write(self.descriptor, view) :]


class _Forward(io.TextIOBase):
    """``sys.stdout`` and ``sys.stderr`` in the child: text goes to the parent's stderr."""

    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click tells a binary stream by its taking bytes
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            self.pipe.send(("text", str(text)))
        return len(text)


def _read(reader: io.BufferedReader) -> tuple[Any, ...] | None:
    """The next message, or None at the end (a message cut by the child's end included)."""
    header = reader.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    data = reader.read(_HEADER.unpack(header)[0])
    try:
        message: tuple[Any, ...] = _loads(data)
    except Exception:  # cut short: the child ended while writing it
        return None
    return message


def run_in_child(task: Callable[[], Iterator[T]]) -> Generator[T, None, None]:
    """Compute what ``task()`` yields in a child process.

    See the module's docstring. An error it raises is raised here, as the same type where it is
    accelctl's.

    :raises AccelctlError: the child ended while it was asking no plugin.
    """
    if not FORK or _thread_count() > 1:
        yield from task()
        return
    global asked_in_child
    asked_in_child = True
    crashed: dict[str, str] = {}
    one_at_a_time = False
    while True:
        child = _Child(task, crashed, one_at_a_time)
        yield from child.results()
        if child.finished:
            return
        asking = child.asking
        cause = child.cause()
        if len(asking) == 1:
            [name] = asking
            crashed[name] = cause
        elif asking and not one_at_a_time:
            one_at_a_time = True  # asked at once: the next child asks one at a time to tell
        else:
            raise AccelctlError(f"accelctl's process asking the plugins {cause}")


def _thread_count() -> int:
    """Count the threads this process runs, native ones included where the system lists them.

    Native ones are a runtime's pool; the system is Linux's ``/proc``, else Python's count."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class _Child:
    """One forked child running ``task``, and what the parent learns of it."""

    def __init__(
        self, task: Callable[[], Iterator[Any]], crashed: dict[str, str], one_at_a_time: bool
    ) -> None:
        self.finished = False
        self.asking: set[str] = set()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # or the child would write what the parent buffered again
            except (OSError, ValueError):
                pass
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            os.close(read)
            _child(task, _Pipe(write), crashed, one_at_a_time)
        os.close(write)
        self.reader = os.fdopen(read, "rb")
        self.status: int | None = None

    def results(self) -> Generator[Any, None, None]:
        try:
            while (message := _read(self.reader)) is not None:
                kind = message[0]
                if kind == "result":
                    yield message[1]
                elif kind == "text":
                    sys.stderr.write(message[1])
                    sys.stderr.flush()
                elif kind == "asking" and message[1] is not None:
                    self.asking.add(message[1])
                elif kind == "answered":
                    self.asking.discard(message[1])
                elif kind == "raised":
                    self.finished = True
                    error, trace = message[1], message[2]
                    error.add_note(f"in the process that asked the plugins:\n{trace}")
                    raise error
                elif kind == "interrupted":
                    self.finished = True
                    raise KeyboardInterrupt
                elif kind == "done":
                    self.finished = True
        finally:
            self.reader.close()
            self._end()

    def _end(self) -> None:
        if self.status is not None:
            return
        if not self.finished:  # a Ctrl-C or an error here, or the child's own end
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.status = os.waitpid(self.pid, 0)[1]

    def cause(self) -> str:
        """How the child ended, in words."""
        status = self.status or 0
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            crash = " (a crash in native code?)" if name in ("SIGSEGV", "SIGBUS", "SIGILL") else ""
            return f"was killed by {name}{crash}"
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return f"ended with exit status {code} (os._exit, or an exit from native code)"


def _child(
    task: Callable[[], Iterator[Any]], pipe: _Pipe, crashed: dict[str, str], one_at_a_time: bool
) -> NoReturn:
    code = 0
    try:
        os.dup2(2, 1)  # a plugin's writes on descriptor 1 go to stderr
        sys.stdout = sys.stderr = _Forward(pipe)
        causes = {
            name: Problem(
                f"the process accelctl asked it in {cause}; accelctl asked the others again "
                "without it"
            )
            for name, cause in crashed.items()
        }
        policy = fanout.Policy(
            started=lambda item: pipe.send(("asking", getattr(item, "name", None))),
            finished=lambda item: pipe.send(("answered", getattr(item, "name", None))),
            skip=causes,
        )
        fanout.set_policy(dataclasses.replace(policy, workers=1) if one_at_a_time else policy)
        for result in task():
            pipe.send(("result", result))
        pipe.send(("done",))
    except KeyboardInterrupt:
        pipe.send(("interrupted",))
        code = 130
    except BaseException as exc:  # a plugin's sys.exit() too: the parent words it (tests/cli)
        import traceback

        pipe.send(("raised", _portable(exc), "".join(traceback.format_exception(exc))))
        code = 1
    finally:
        os._exit(code)  # the child's threads (a late plugin's) end with it


def _portable(exc: BaseException) -> BaseException:
    """Return ``exc`` where it survives pickling, else an error of its text.

    accelctl's errors survive, their parts with them. The error of its text is accelctl's where it
    is one of accelctl's, else a RuntimeError."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        text = f"{type(exc).__name__}: {exc}"
        return AccelctlError(str(exc)) if isinstance(exc, AccelctlError) else RuntimeError(text)
    return exc

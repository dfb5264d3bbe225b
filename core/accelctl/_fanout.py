"""Asking many plugins at once: a bounded set of daemon threads and one deadline per plugin.

Where accelctl asks every plugin (``list``, ``env``, ``stats``, ``"auto"``, an alias,
``validate``), :func:`run_each` runs each one's work in daemon threads and waits for it at most
``ACCELCTL_HOOK_TIMEOUT`` seconds; a late plugin gets its :meth:`late` error and is left running
(Python cannot stop a thread), not asked again until it returns. The plugins are asked one after
another in one thread while each answers quickly, and by one more thread (up to
:data:`MAX_WORKERS`) whenever every thread has been busy with one plugin for
:data:`GROW_AFTER_S`: plain Python shares one interpreter lock, so threads help only plugins that
wait. Daemon threads never delay the interpreter's exit, unlike ``concurrent.futures``. Nothing
here runs per hook call.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Generic, Protocol, TypeVar

from . import _settings
from ._errors import AccelctlError

#: Threads one :func:`run_each` runs at once at most: more only adds GIL contention.
MAX_WORKERS = 8
#: How long every running thread must have been busy with one plugin before another starts.
GROW_AFTER_S = 0.02
#: The longest the waiting thread sleeps at a time (how soon a Ctrl-C is seen).
POLL_S = 0.2


class Askable(Protocol):
    """What :func:`run_each` asks: a plugin's handle."""

    def late(self, seconds: float, frame: FrameType | None) -> AccelctlError:
        """The error of this plugin past its deadline; ``frame`` is where its thread is."""
        ...


A = TypeVar("A", bound=Askable)
T = TypeVar("T")


class _Task(Generic[A, T]):
    __slots__ = ("abandoned", "began", "error", "item", "started", "thread", "value", "work")

    def __init__(self, item: A, work: Callable[[A], T]) -> None:
        self.item, self.work = item, work
        self.began = 0.0  # when a worker took it
        self.started: float | None = None  # on the clock since then; None: off it
        self.thread: threading.Thread | None = None
        self.value: T | None = None
        self.error: BaseException | None = None
        self.abandoned = False


_local = threading.local()  # .task: the task this worker runs
#: Plugins whose work is still running past its deadline, and that thread.
_late: weakref.WeakKeyDictionary[object, tuple[threading.Thread, AccelctlError]] = (
    weakref.WeakKeyDictionary()
)
_abandoned: list[threading.Thread] = []


def abandoned_threads() -> list[threading.Thread]:
    """Threads left running plugin code past its deadline that have not ended yet."""
    _abandoned[:] = [thread for thread in _abandoned if thread.is_alive()]
    return list(_abandoned)


def run_each(
    items: Sequence[A], work: Callable[[A], T], *, workers: int = MAX_WORKERS
) -> list[T | AccelctlError]:
    """``work(item)`` for every item, concurrently; per item its value or the
    :class:`~accelctl.AccelctlError` it raised or its deadline gave (any other exception is
    accelctl's own bug, raised here).

    :raises SettingError: ``ACCELCTL_HOOK_TIMEOUT`` is not a number of seconds.
    """
    timeout = _settings.hook_timeout()
    with off_clock():  # inside a task, the inner tasks have the deadlines: the outer one waits
        return _run(items, work, workers, timeout)


def _run(
    items: Sequence[A], work: Callable[[A], T], workers: int, timeout: float | None
) -> list[T | AccelctlError]:
    tasks = [_Task(item, work) for item in items]
    waiting: deque[_Task[A, T]] = deque()
    for task in tasks:
        busy = _late.get(task.item)
        if busy is not None and busy[0].is_alive():
            task.error = busy[1]  # still stuck since an earlier call: not asked again
        else:
            waiting.append(task)
    running: set[_Task[A, T]] = set()
    done = threading.Condition()
    threads = [0]  # workers started and not given up

    def worker() -> None:
        while True:
            with done:
                if not waiting:
                    threads[0] -= 1
                    return
                task = waiting.popleft()
                running.add(task)
                task.thread = threading.current_thread()
                task.began = task.started = time.monotonic()
            _local.task = task
            try:
                value, error = task.work(task.item), None
            except BaseException as exc:  # handed to the caller, as an inline call would
                value, error = None, exc
            with done:
                if task.abandoned:  # given up past its deadline: this thread is done
                    return
                task.value, task.error = value, error
                running.discard(task)
                if not waiting and not running:
                    done.notify_all()

    def start() -> None:
        threads[0] += 1
        threading.Thread(target=worker, name="accelctl-plugin", daemon=True).start()

    with done:
        if waiting:
            start()
        while waiting or running:  # every task not done yet is in one of them
            now = time.monotonic()
            wait = POLL_S
            for task in list(running):
                started = task.started
                if timeout is None or started is None:
                    continue
                remaining = started + timeout - now
                if remaining > 0:
                    wait = min(wait, remaining)
                    continue
                _give_up(task, timeout)
                running.discard(task)
                threads[0] -= 1
            if waiting and threads[0] < workers:
                # One more thread once every thread has been busy with one plugin for
                # GROW_AFTER_S (it waits on I/O, a device, a lock or a hang; see the docstring).
                quick = [task.began + GROW_AFTER_S - now for task in running]
                if threads[0] == 0 or (quick and max(quick) <= 0):
                    start()
                    continue
                # (none running: a thread is between two plugins; look again as soon)
                wait = min(wait, max(max(quick), 0.001) if quick else GROW_AFTER_S)
            if waiting or running:
                # Woken at least every POLL_S: a Ctrl-C the kernel gave a worker thread is
                # handled by Python in the main thread only once that thread runs again.
                done.wait(wait)
    results: list[T | AccelctlError] = []
    for task in tasks:
        if task.error is None:
            results.append(task.value)  # type: ignore[arg-type]
        elif isinstance(task.error, AccelctlError):
            results.append(task.error)
        else:
            raise task.error
    return results


class _Call:
    """The item of :func:`run_one`: whichever plugin's handle is on the stuck thread's stack."""

    def late(self, seconds: float, frame: FrameType | None) -> AccelctlError:
        from ._plugin import AcceleratorHandle

        inner, owner = frame, None
        while frame is not None and owner is None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, AcceleratorHandle):
                owner = candidate
            frame = frame.f_back
        if owner is not None:
            return owner.late(seconds, inner)
        return AccelctlError(f"accelctl did not finish within {seconds:g} s")


def run_one(work: Callable[[], T]) -> T:
    """``work()`` in a worker thread under the deadline (the CLI's named commands): its value, or
    the error it raised or its deadline gave, raised here."""
    [result] = run_each([_Call()], lambda _: work())
    if isinstance(result, AccelctlError):
        raise result
    return result


def _give_up(task: _Task[A, T], timeout: float) -> None:
    thread = task.thread
    frame = sys._current_frames().get(thread.ident) if thread and thread.ident else None
    task.abandoned = True
    task.error = error = task.item.late(timeout, frame)
    if thread is not None:
        _abandoned.append(thread)
        _late[task.item] = (thread, error)
    with _serial:  # a stuck task inside the serial section lets the next one in
        global _serial_owner
        if _serial_owner is task:
            _serial_owner = None
        _serial.notify_all()


def restart_clock() -> None:
    """Give the current task a new deadline from now (``validate``: one per check)."""
    task = getattr(_local, "task", None)
    if task is not None:
        task.started = time.monotonic()


@contextlib.contextmanager
def off_clock() -> Iterator[None]:
    """Run accelctl's own slow work (a subprocess with its own timeout) outside the deadline."""
    task = getattr(_local, "task", None)
    if task is not None:
        task.started = None
    try:
        yield
    finally:
        restart_clock()


_serial = threading.Condition()
_serial_owner: object | None = None


@contextlib.contextmanager
def one_at_a_time() -> Iterator[None]:
    """A section run by one thread at a time (importing plugins, compared before and after).
    Waiting to enter is off the clock; a task given up inside it lets the next one in."""
    global _serial_owner
    task = getattr(_local, "task", None)
    me: object = task if task is not None else object()
    with _serial:
        if task is not None:
            task.started = None
        while _serial_owner is not None:
            _serial.wait()
        _serial_owner = me
    restart_clock()
    try:
        yield
    finally:
        with _serial:
            if _serial_owner is me:
                _serial_owner = None
                _serial.notify_all()

"""Asking many plugins at once: a bounded pool of daemon threads and one deadline per plugin.

Where accelctl asks every plugin (``list``, ``env``, ``stats``, ``"auto"``, an alias,
``validate``), :func:`run_each` asks them in the caller's order from a pool of daemon threads:
one, and one more (up to :data:`MAX_WORKERS`) whenever every thread has been busy with one plugin
for :data:`GROW_AFTER_S`, since plain Python shares one interpreter lock and threads help only
plugins that wait. It waits for each at most ``ACCELCTL_HOOK_TIMEOUT`` seconds
from when a thread took it. A late plugin gets its own :meth:`~Askable.late` error and is left
running (Python cannot stop a thread), not asked again until it returns; a thread replaces the
one it holds. Daemon threads never delay the interpreter's exit, unlike ``concurrent.futures``.
The fan-out knows its items only as :class:`Askable`: it imports nothing of the handles. Nothing
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

#: Threads one :func:`run_each` runs at once at most (fewer for fewer items): plain Python
#: shares one interpreter lock, so more only help plugins that wait, and add contention.
MAX_WORKERS = 8
#: How long every running thread must have been busy with one plugin before another starts:
#: plain Python shares one interpreter lock, so threads help only plugins that wait: 8 threads
#: from the start made `list` of 1000 quick plugins slower than one, in wall clock and in CPU
#: (docs/performance.md).
GROW_AFTER_S = 0.02
#: The longest the waiting thread sleeps at a time (how soon a Ctrl-C is seen).
POLL_S = 0.2


class Askable(Protocol):
    """What :func:`run_each` asks: a plugin's handle, or something that answers for one."""

    def late(self, seconds: float, frame: FrameType | None) -> AccelctlError:
        """The error of this plugin past its deadline; ``frame`` is where its thread is."""
        ...


A = TypeVar("A", bound=Askable)
T = TypeVar("T")

_local = threading.local()  # .run and .index: the fan-out and the item this worker asks
#: Plugins whose work is still running past its deadline, and that thread.
_late: weakref.WeakKeyDictionary[object, tuple[threading.Thread, AccelctlError]] = (
    weakref.WeakKeyDictionary()
)
_abandoned: list[threading.Thread] = []


#: Called with ``(True, item)`` when a worker takes an item and ``(False, item)`` when its work
#: returns (see :func:`observe`).
_observer: Callable[[bool, object], None] | None = None
#: Plugins (by name) not to ask, with why: they ended the process that asked them before.
_ended: dict[str, str] = {}


def observe(observer: Callable[[bool, object], None] | None) -> None:
    """Have ``observer(True, item)`` called in the worker's thread when it starts asking an item,
    ``observer(False, item)`` when that returns; None: no more. What a process that asks
    plugins on another's behalf tells it, so that the plugin it was asking when it ended can be
    named (the CLI's :mod:`accelctl.cli._apart`)."""
    global _observer
    _observer = observer


def never_ask(ended: dict[str, str]) -> None:
    """Answer for each plugin named in ``ended`` (by its name) with an error of its cause
    instead of asking it (its :meth:`ended` error where it has one): it ended the process that
    asked it before."""
    _ended.clear()
    _ended.update(ended)


def _ended_error(item: object, cause: str) -> AccelctlError:
    make = getattr(item, "ended", None)
    return make(cause) if callable(make) else AccelctlError(cause)


def abandoned_threads() -> list[threading.Thread]:
    """Threads left running plugin code past its deadline that have not ended yet."""
    _abandoned[:] = [thread for thread in _abandoned if thread.is_alive()]
    return list(_abandoned)


class _Run(Generic[A, T]):
    """One :func:`run_each` call: its items in order, and per item (by index) when its deadline
    started (None: off the clock), the thread asking it and its outcome."""

    def __init__(self, items: Sequence[A], work: Callable[[A], T]) -> None:
        self.items, self.work = list(items), work
        self.started: list[float | None] = [None] * len(self.items)
        self.threads: list[threading.Thread | None] = [None] * len(self.items)
        self.values: list[T | None] = [None] * len(self.items)
        self.errors: list[BaseException | None] = [None] * len(self.items)
        self.began: list[float] = [0.0] * len(self.items)  # when a thread took it
        self.waiting: deque[int] = deque()
        self.running: set[int] = set()
        self.given_up: set[int] = set()
        self.active = 0  # threads taking items (not those left with a late plugin)
        self.lock = threading.Condition()

    def worker(self) -> None:
        _local.run = self
        while True:
            with self.lock:
                if not self.waiting:
                    self.active -= 1
                    return
                index = self.waiting.popleft()
                self.running.add(index)
                self.threads[index] = threading.current_thread()
                self.started[index] = self.began[index] = time.monotonic()
            _local.index = index
            item = self.items[index]
            if _observer is not None:
                _observer(True, item)
            try:
                value, error = self.work(item), None
            except BaseException as exc:  # handed to the caller, as an inline call would
                value, error = None, exc
            if _observer is not None:
                _observer(False, item)
            with self.lock:
                if index in self.given_up:  # past its deadline: a new thread took this one's place
                    return
                self.values[index], self.errors[index] = value, error
                self.running.discard(index)
                if not self.waiting and not self.running:
                    self.lock.notify_all()

    def start(self) -> None:
        self.active += 1
        threading.Thread(target=self.worker, name="accelctl-plugin", daemon=True).start()

    def grow_in(self, now: float, workers: int) -> float | None:
        """Start one more thread when every running one has been busy with one plugin for
        :data:`GROW_AFTER_S` and items wait; else how long until that may be so (None: never,
        as things stand)."""
        if not self.waiting or not self.running or self.active >= workers:
            return None
        left = max(self.began[index] for index in self.running) + GROW_AFTER_S - now
        if left > 0:
            return left
        self.start()
        return None

    def give_up(self, index: int, timeout: float) -> None:
        """Record the late error of item ``index``, made by the item from where its thread is."""
        thread = self.threads[index]
        # The thread's stack is only for the message: which of its hooks the plugin is in.
        frame = sys._current_frames().get(thread.ident) if thread and thread.ident else None
        self.given_up.add(index)
        self.running.discard(index)
        self.active -= 1  # that thread is the late plugin's now
        item = self.items[index]
        self.errors[index] = error = item.late(timeout, frame)
        if thread is not None:
            _abandoned.append(thread)
            _late[item] = (thread, error)


def run_each(
    items: Sequence[A], work: Callable[[A], T], *, workers: int | None = None
) -> list[T | AccelctlError]:
    """``work(item)`` for every item, from a pool of daemon threads (``workers``, default
    :data:`MAX_WORKERS`); per item its value or the :class:`~accelctl.AccelctlError` it raised or
    its deadline gave (any other exception is accelctl's own bug, raised here).

    :raises SettingError: ``ACCELCTL_HOOK_TIMEOUT`` is not a number of seconds.
    """
    timeout = _settings.hook_timeout()
    with _off_clock():
        return _run(_Run(items, work), MAX_WORKERS if workers is None else workers, timeout)


def _run(run: _Run[A, T], workers: int, timeout: float | None) -> list[T | AccelctlError]:
    for index, item in enumerate(run.items):
        busy = _late.get(item)
        name = getattr(item, "name", None)
        ended = _ended.get(name) if _ended and isinstance(name, str) else None
        if busy is not None and busy[0].is_alive():
            run.errors[index] = busy[1]  # still stuck since an earlier call: not asked again
        elif ended is not None:
            run.errors[index] = _ended_error(item, ended)
        else:
            run.waiting.append(index)
    with run.lock:
        if run.waiting:
            run.start()  # one thread; more while every one waits on a slow plugin
        while run.waiting or run.running:  # every item not done yet is in one of them
            now, wait = time.monotonic(), POLL_S
            grow = run.grow_in(now, workers)
            if grow is not None:
                wait = min(wait, grow)
            for index in list(run.running):
                started = run.started[index]
                if timeout is None or started is None:
                    continue
                remaining = started + timeout - now
                if remaining > 0:
                    wait = min(wait, remaining)
                    continue
                run.give_up(index, timeout)
                if run.waiting and run.active == 0:
                    run.start()  # in place of the thread left with the late plugin
            if run.waiting or run.running:
                # Woken at least every POLL_S: a Ctrl-C the kernel gave a worker thread is
                # handled by Python in the main thread only once that thread runs again.
                run.lock.wait(wait)
    results: list[T | AccelctlError] = []
    for value, error in zip(run.values, run.errors, strict=True):
        if error is None:
            results.append(value)  # type: ignore[arg-type]
        elif isinstance(error, AccelctlError):
            results.append(error)
        else:
            raise error
    return results


class _Unnamed:
    """The item of :func:`run_one` when no plugin is named: past the deadline, accelctl's own
    error."""

    def late(self, seconds: float, frame: FrameType | None) -> AccelctlError:
        return AccelctlError(f"accelctl did not finish within {seconds:g} s")


def run_one(work: Callable[[], T], plugin: Askable | None = None) -> T:
    """``work()`` in a worker thread under the deadline (the CLI's named commands): its value, or
    the error it raised or its deadline gave, raised here; past the deadline the error is
    ``plugin``'s (the plugin ``work`` is for, where the caller knows it), else accelctl's own."""
    [result] = run_each([plugin if plugin is not None else _Unnamed()], lambda _: work())
    if isinstance(result, AccelctlError):
        raise result
    return result


@contextlib.contextmanager
def _off_clock() -> Iterator[None]:
    """A fan-out inside a task (an alias looked up while a plugin is checked): the inner tasks
    have the deadlines, the outer one waits, its clock started again from the end."""
    run = getattr(_local, "run", None)
    index = getattr(_local, "index", None)
    if run is not None:
        run.started[index] = None
    try:
        yield
    finally:
        if run is not None:
            run.started[index] = time.monotonic()

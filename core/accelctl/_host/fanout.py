"""Asking many plugins at once: a bounded pool of daemon threads and one deadline per plugin.

Where accelctl asks every plugin (``list``, ``env``, ``stats``, ``"auto"``, an alias,
``validate``), :func:`run_each` asks them from a pool of daemon threads: one, and one more (up to
:data:`MAX_WORKERS`) while every thread has been busy with one plugin for :data:`GROW_AFTER_S`
and plugins wait (docs/design/fan-out-pool.md: threads started up front cost quick plugins more than
they give). It waits for each at most ``ACCELCTL_HOOK_TIMEOUT`` seconds from when a thread took
it. A plugin past its deadline gets the error of a late plugin and is left running
(Python cannot stop a thread), not asked again until it returns; a new thread takes the place of
the one it holds. The threads are daemons so that a plugin that never returns never delays the
interpreter's exit, which ``concurrent.futures`` would (its workers are joined at exit).

This is the only module that knows a deadline. It knows its items only as :class:`FanOutItem`;
nothing here runs per hook call.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from .._contract import settings
from .._contract.errors import AccelctlError

#: Threads one :func:`run_each` runs at once at most (fewer for fewer items): plain Python
#: shares one interpreter lock, so more only help plugins that wait, and add contention.
MAX_WORKERS = 8
#: How long every running thread must have been busy with one plugin before another starts.
GROW_AFTER_S = 0.02
#: The longest the waiting thread sleeps at a time (how soon a Ctrl-C is seen).
POLL_S = 0.2


class FanOutItem(Protocol):
    """What :func:`run_each` asks: a plugin's handle, or something that answers for one."""

    def busy_with(self) -> str:
        """What it is doing, for the message of a late plugin: ``"detect()"``, ``"its import"``."""
        ...

    def error_for(self, hook: str | None, problem: str) -> AccelctlError:
        """Its error for ``problem`` (``hook``: the hook it concerns, None: none)."""
        ...


A = TypeVar("A", bound=FanOutItem)
T = TypeVar("T")

_local = threading.local()  # .run and .index: the fan-out and the item this worker asks
#: Plugins whose work is still running past its deadline: that thread, and the error given.
_timed_out: weakref.WeakKeyDictionary[object, tuple[threading.Thread, AccelctlError]] = (
    weakref.WeakKeyDictionary()
)
_abandoned: list[threading.Thread] = []

#: Called with ``(True, item)`` when a worker takes an item and ``(False, item)`` when its work
#: returns (see :func:`observe`).
_observer: Callable[[bool, object], None] | None = None
#: Threads a run may have at once in this process (:func:`one_at_a_time` sets 1).
_max_workers = MAX_WORKERS
#: Plugins (by name) not to ask, with why: they crashed the process that asked them before.
_crashed: dict[str, str] = {}


def observe(observer: Callable[[bool, object], None] | None) -> None:
    """Have ``observer`` told when the worker's thread starts and ends asking an item.

    ``observer(True, item)`` at the start, ``observer(False, item)`` when that returns; None: no
    more. What a process that asks plugins on another's behalf tells it, so that the plugin it was
    asking when it ended can be named (the CLI's :mod:`accelctl.cli._child`)."""
    global _observer
    _observer = observer


def one_at_a_time() -> None:
    """Ask one plugin at a time in this process from now on.

    A process that asks plugins on another's behalf (:mod:`accelctl.cli._child`), so that a plugin
    that crashes it is known."""
    global _max_workers
    _max_workers = 1


def skip_crashed(crashed: dict[str, str]) -> None:
    """Answer with an error, instead of asking, for each plugin named in ``crashed``.

    ``crashed`` maps a plugin's name to its error's cause: it crashed the process that asked it
    before."""
    _crashed.clear()
    _crashed.update(crashed)


def abandoned_threads() -> list[threading.Thread]:
    """Threads left running plugin code past its deadline that have not ended yet."""
    _abandoned[:] = [thread for thread in _abandoned if thread.is_alive()]
    return list(_abandoned)


def timeout_error(item: FanOutItem, seconds: float) -> AccelctlError:
    """The error of ``item`` when it has not answered within ``seconds``."""
    if isinstance(item, _Unnamed):
        return AccelctlError(f"accelctl did not finish within {seconds:g} s")
    doing = item.busy_with()
    return item.error_for(
        doing.removesuffix("()") if doing.endswith("()") else None,
        f"{doing} did not answer within {seconds:g} s (ACCELCTL_HOOK_TIMEOUT: how long "
        "accelctl waits for each plugin where it asks several at once)",
    )


class _Run(Generic[A, T]):
    """One :func:`run_each` call: its items, what waits, what is being asked, and each outcome.

    Its items, the indices waiting for a thread and those being asked (with when their deadline
    started; None: off the clock), and each outcome."""

    def __init__(self, items: Sequence[A], work: Callable[[A], T]) -> None:
        self.items, self.work = list(items), work
        self.values: list[T | None] = [None] * len(self.items)
        self.errors: list[BaseException | None] = [None] * len(self.items)
        self.threads: list[threading.Thread | None] = [None] * len(self.items)
        self.waiting: deque[int] = deque()
        self.running: dict[int, float | None] = {}
        self.given_up: set[int] = set()
        self.workers = 0  # threads taking items (not those left with a late plugin)
        self.lock = threading.Condition()

    def worker(self) -> None:
        _local.run = self
        while True:
            with self.lock:
                if not self.waiting:
                    self.workers -= 1
                    return
                index = self.waiting.popleft()
                self.running[index] = time.monotonic()
                self.threads[index] = threading.current_thread()
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
                if index in self.given_up:  # past its deadline: another thread took its place
                    return
                self.values[index], self.errors[index] = value, error
                del self.running[index]
                if not self.waiting and not self.running:
                    self.lock.notify_all()  # the caller's timed waits see the rest

    def start(self) -> None:
        self.workers += 1
        threading.Thread(target=self.worker, name="accelctl-plugin", daemon=True).start()

    def give_up(self, index: int, timeout: float) -> None:
        """Record the late error of item ``index`` and leave its thread to it."""
        del self.running[index]
        self.given_up.add(index)
        self.workers -= 1  # that thread is the late plugin's now
        item, thread = self.items[index], self.threads[index]
        self.errors[index] = error = timeout_error(item, timeout)
        if thread is not None:
            _abandoned.append(thread)
            _timed_out[item] = (thread, error)
        if self.waiting and self.workers == 0:
            self.start()  # in place of the thread left with the late plugin

    def grow(self, now: float, limit: int) -> float:
        """Start one more thread where every running one has been busy long enough and items wait.

        Busy for :data:`GROW_AFTER_S`; returns how long until that is worth asking again."""
        if not self.waiting or not self.running or self.workers >= limit:
            return POLL_S  # nothing to grow for, or no thread has taken a plugin yet
        # An item off the clock waits for a fan-out of its own: busy, as long as can be.
        latest = max((at for at in self.running.values() if at is not None), default=0.0)
        if now - latest < GROW_AFTER_S:
            return max(GROW_AFTER_S - (now - latest), 0.001)
        self.start()
        return GROW_AFTER_S


def run_each(
    items: Sequence[A], work: Callable[[A], T], *, workers: int | None = None
) -> list[T | AccelctlError]:
    """Call ``work(item)`` for every item from a pool of daemon threads, each under a deadline.

    ``workers`` defaults to :data:`MAX_WORKERS`; per item its value or the
    :class:`~accelctl.AccelctlError` it raised or its deadline gave (any other exception is
    accelctl's own bug, raised here).

    :raises SettingError: ``ACCELCTL_HOOK_TIMEOUT`` is not a number of seconds.
    """
    timeout = settings.hook_timeout()
    run = _Run(items, work)
    for index, item in enumerate(run.items):
        busy = _timed_out.get(item)
        name = getattr(item, "name", None)
        crashed = _crashed.get(name) if _crashed and isinstance(name, str) else None
        if busy is not None and busy[0].is_alive():
            run.errors[index] = busy[1]  # still stuck since an earlier call: not asked again
        elif crashed is not None:
            run.errors[index] = item.error_for(None, crashed)
        else:
            run.waiting.append(index)
    limit = min(_max_workers, MAX_WORKERS if workers is None else workers)
    with _deadline_paused(), run.lock:
        if run.waiting:
            run.start()
        while run.waiting or run.running:
            now = time.monotonic()
            wait = min(POLL_S, run.grow(now, limit))
            for index, started in list(run.running.items()):
                if timeout is None or started is None:
                    continue
                if now - started >= timeout:
                    run.give_up(index, timeout)
                else:
                    wait = min(wait, started + timeout - now)
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
    """The item of :func:`run_one` when no plugin is named.

    Past the deadline, accelctl's own error."""

    def busy_with(self) -> str:
        return "accelctl"

    def error_for(self, hook: str | None, problem: str) -> AccelctlError:
        return AccelctlError(problem)


def run_one(work: Callable[[], T], plugin: FanOutItem | None = None) -> T:
    """Call ``work()`` in a worker thread under the deadline and return or raise its outcome.

    For the CLI's named commands: its value, or the error it raised or its deadline gave, raised
    here; past the deadline the error is ``plugin``'s (the plugin ``work`` is for, where the caller
    knows it), else accelctl's own."""
    [result] = run_each([plugin if plugin is not None else _Unnamed()], lambda _: work())
    if isinstance(result, AccelctlError):
        raise result
    return result


@contextlib.contextmanager
def _deadline_paused() -> Iterator[None]:
    """Pause the outer deadline while a fan-out inside a task runs.

    Such as an alias looked up while a plugin is checked: the inner tasks have the deadlines,
    the outer one waits, its clock started again from the end."""
    run = getattr(_local, "run", None)
    index = getattr(_local, "index", None)
    if run is not None:
        with run.lock:
            if index in run.running:
                run.running[index] = None
    try:
        yield
    finally:
        if run is not None:
            with run.lock:
                if index in run.running:
                    run.running[index] = time.monotonic()

"""Asking many plugins at once: a fixed pool of daemon threads and one deadline per plugin.

Where accelctl asks every plugin (``list``, ``env``, ``stats``, ``"auto"``, an alias,
``validate``), :func:`run_each` asks them from ``min(len(items), workers)`` daemon threads
(:class:`Policy`; docs/design/fan-out-pool.md). It waits for each at most
``ACCELCTL_HOOK_TIMEOUT`` seconds from when a thread took it. A plugin past its deadline gets the
error of a late plugin and is left running (Python cannot stop a thread), not asked again until
it returns; a new thread takes the place of the one it holds. The threads are daemons so that a
plugin that never returns never delays the interpreter's exit, which ``concurrent.futures``
would (its workers are joined at exit).

This is the only module that knows a deadline. It knows its items only as :class:`FanOutItem`;
nothing here runs per hook call.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from .._base.problem import Problem
from .._contract import settings
from .._contract.errors import AccelctlError

#: The longest the waiting thread sleeps at a time (how soon a Ctrl-C is seen).
POLL_S = 0.2


@dataclass(frozen=True)
class Policy:
    """How this process asks plugins at once: threads, who is told, whom not to ask.

    The default suits a command run by a user; the CLI's child process that asks plugins on
    another's behalf sets its own (:mod:`accelctl.cli._child`) with :func:`set_policy`.
    """

    #: Threads one :func:`run_each` runs at most (fewer for fewer items): plain Python shares one
    #: interpreter lock, so more help only plugins that wait, and add contention.
    workers: int = 4
    #: Called with the item when a thread takes it; None: nobody.
    started: Callable[[object], None] | None = None
    #: Called with the item when its work has returned or raised; None: nobody.
    finished: Callable[[object], None] | None = None
    #: Plugins (by name) answered with their problem's error instead of being asked.
    skip: Mapping[str, Problem] = field(default_factory=dict)


_policy = Policy()


def set_policy(policy: Policy) -> Policy:
    """Ask plugins by ``policy`` from now on in this process; return the policy it replaces."""
    global _policy
    previous, _policy = _policy, policy
    return previous


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


def abandoned_threads() -> list[threading.Thread]:
    """Threads left running plugin code past its deadline that have not ended yet."""
    _abandoned[:] = [thread for thread in _abandoned if thread.is_alive()]
    return list(_abandoned)


def timeout_error(item: FanOutItem, seconds: float) -> AccelctlError:
    """The error of ``item`` when it has not answered within ``seconds``."""
    if isinstance(item, _Unnamed):  # no plugin named: accelctl's own words
        return AccelctlError(f"accelctl did not finish within {seconds:g} s")
    doing = item.busy_with()
    return item.error_for(
        doing.removesuffix("()") if doing.endswith("()") else None,
        f"{doing} did not answer within {seconds:g} s (ACCELCTL_HOOK_TIMEOUT: how long "
        "accelctl waits for each plugin where it asks several at once)",
    )


class _Run(Generic[A, T]):
    """One :func:`run_each` call: its items, what waits, what is being asked, and each outcome.

    ``running`` maps an item's index to when its deadline started (None: paused while a fan-out
    of its own runs)."""

    def __init__(self, items: Sequence[A], work: Callable[[A], T], policy: Policy) -> None:
        self.items, self.work, self.policy = list(items), work, policy
        self.values: list[T | None] = [None] * len(self.items)
        self.errors: list[BaseException | None] = [None] * len(self.items)
        self.threads: list[threading.Thread | None] = [None] * len(self.items)
        self.waiting: deque[int] = deque()
        self.running: dict[int, float | None] = {}
        self.given_up: set[int] = set()
        self.lock = threading.Condition()

    def worker(self) -> None:
        _local.run = self
        while True:
            with self.lock:
                if not self.waiting:
                    return
                index = self.waiting.popleft()
                self.running[index] = time.monotonic()
                self.threads[index] = threading.current_thread()
            _local.index = index
            item, started, finished = self.items[index], self.policy.started, self.policy.finished
            try:
                if started is not None:
                    started(item)
                try:
                    value, error = self.work(item), None
                finally:
                    if finished is not None:
                        finished(item)
            except BaseException as exc:  # handed to the caller, as an inline call would
                value, error = None, exc
            with self.lock:
                if index in self.given_up:  # past its deadline: another thread took its place
                    return
                self.values[index], self.errors[index] = value, error
                del self.running[index]
                if not self.waiting and not self.running:
                    self.lock.notify_all()  # the caller's timed waits see the rest

    def start(self) -> None:
        threading.Thread(target=self.worker, name="accelctl-plugin", daemon=True).start()

    def give_up(self, index: int, timeout: float) -> None:
        """Record the late error of item ``index`` and leave its thread to it."""
        del self.running[index]
        self.given_up.add(index)
        item, thread = self.items[index], self.threads[index]
        self.errors[index] = error = timeout_error(item, timeout)
        if thread is not None:
            _abandoned.append(thread)
            _timed_out[item] = (thread, error)
        if self.waiting:
            self.start()  # in place of the thread left with the late plugin

    def wait_all(self, timeout: float | None) -> None:
        """Wait until every item is answered or given up (called holding the lock)."""
        while self.waiting or self.running:
            now, wait = time.monotonic(), POLL_S
            for index, started in list(self.running.items()):
                if timeout is None or started is None:
                    continue
                if now - started >= timeout:
                    self.give_up(index, timeout)
                else:
                    wait = min(wait, started + timeout - now)
            if self.waiting or self.running:
                # Woken at least every POLL_S: a Ctrl-C the kernel gave a worker thread is
                # handled by Python in the main thread only once that thread runs again.
                self.lock.wait(wait)


def run_each(
    items: Sequence[A], work: Callable[[A], T], *, one_at_a_time: bool = False
) -> list[T | AccelctlError]:
    """Call ``work(item)`` for every item from a fixed pool of threads, each under a deadline.

    The pool has ``min(len(items), workers)`` threads, ``workers`` the policy's (:class:`Policy`);
    one thread where ``one_at_a_time`` (plugins imported one after the other). Per item its value
    or the :class:`~accelctl.AccelctlError` it raised or its deadline gave (any other exception
    is accelctl's own bug, raised here).

    :raises SettingError: ``ACCELCTL_HOOK_TIMEOUT`` is not a number of seconds.
    """
    timeout = settings.hook_timeout()
    policy = _policy
    run = _Run(items, work, policy)
    for index, item in enumerate(run.items):
        busy = _timed_out.get(item)
        name = getattr(item, "name", None)
        skipped = policy.skip.get(name) if policy.skip and isinstance(name, str) else None
        if busy is not None and busy[0].is_alive():
            run.errors[index] = busy[1]  # still stuck since an earlier call: not asked again
        elif skipped is not None:
            run.errors[index] = item.error_for(None, str(skipped))
        else:
            run.waiting.append(index)
    size = min(len(run.waiting), 1 if one_at_a_time else policy.workers)
    with _deadline_paused(), run.lock:
        for _ in range(size):
            run.start()
        run.wait_all(timeout)
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
    """The item of :func:`run_one` when no plugin is named: past the deadline, accelctl's error.

    Worded by :func:`timeout_error`: how long accelctl took, not what it asked."""

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

"""A deadline for plugin code: hooks run in daemon worker threads that a supervisor watches.

A hook that never returns (a ``detect()`` stuck on a driver, say) must not hang ``accelctl list``
or ``resolve("auto")``. Python cannot stop a thread, so the hook runs in a daemon worker thread
and the caller waits for it at most :func:`hook_timeout` seconds per hook call; past that the
caller gets the error its ``on_timeout`` built and goes on, and the worker is abandoned (it ends
when the hook does, or with the process: daemon threads never delay the interpreter's exit).

:func:`run_all` runs several pieces of work at once (one per plugin, for ``list`` and
``resolve("auto")``) and watches each hook call they make; :func:`guard` is the one-call form that
:func:`accelctl._hookcall.call_hook` uses. ``concurrent.futures`` is not used on purpose: its
workers are joined at interpreter exit, so a stuck hook would hang the exit it was meant to spare.
"""

from __future__ import annotations

import contextvars
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._errors import AccelctlError
from ._project import ENV_HOOK_TIMEOUT

T = TypeVar("T")

#: Seconds a hook call may take before it is reported as not answering (``ACCELCTL_HOOK_TIMEOUT``).
DEFAULT_HOOK_TIMEOUT_S = 10.0
#: Worker threads that :func:`run_all` starts at most (more work waits for a free one): enough for
#: the plugins of one machine; more only adds GIL contention (1000 plugins: 16 cost 50 % more CPU).
MAX_WORKERS = 8
_DISABLED = frozenset({"0", "none", "off"})


class HookTimeoutError(AccelctlError, ValueError):
    """``ACCELCTL_HOOK_TIMEOUT`` holds something that is not a deadline (the user's error, never
    blamed on a plugin)."""


def hook_timeout(environ: Mapping[str, str] | None = None) -> float | None:
    """The deadline of one hook call in seconds, from ``ACCELCTL_HOOK_TIMEOUT``; None: no deadline.

    Unset or empty: :data:`DEFAULT_HOOK_TIMEOUT_S`. ``0``, ``none`` or ``off``: wait forever.

    :raises HookTimeoutError: for a value that is not a positive, finite number of seconds.
    """
    raw = (os.environ if environ is None else environ).get(ENV_HOOK_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_HOOK_TIMEOUT_S
    if raw.lower() in _DISABLED:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    # threading's waits overflow past about 9e9 s (their C limit); a year is "forever" enough.
    if not (0 < seconds <= 366 * 24 * 3600):
        raise HookTimeoutError(
            f"{ENV_HOOK_TIMEOUT}={raw[:40]!r} is not a deadline: give the seconds a plugin's hook "
            f"may take (a number above 0, at most a year; default {DEFAULT_HOOK_TIMEOUT_S:g}), "
            f"or 'none' to wait forever"
        )
    return seconds


@dataclass
class Outcome(Generic[T]):
    """What one piece of work gave: its value, or the exception it raised (or its deadline's)."""

    value: T | None = None
    error: BaseException | None = None

    def unwrap(self) -> T:
        """The value; the exception is raised again."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class _Watch:
    """The hook call a worker is running now, as its supervisor sees it.

    Only the worker writes it; ``current`` is replaced whole (one atomic assignment), so the
    supervisor reads a consistent pair without a lock (hook calls are frequent: ``list`` of 1000
    plugins makes thousands).
    """

    def __init__(self) -> None:
        self.depth = 0
        #: (when the call started, the error its deadline raises), or None between hook calls.
        self.current: tuple[float, Callable[[float], BaseException]] | None = None

    def enter(self, on_timeout: Callable[[float], BaseException]) -> None:
        self.depth += 1
        if self.depth == 1:  # a hook that calls another hook: the outer deadline holds
            self.current = (time.monotonic(), on_timeout)

    def leave(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.current = None


class _Task(Generic[T]):
    def __init__(self, function: Callable[[], T]) -> None:
        self.function = function
        self.context = contextvars.copy_context()  # the caller's context variables, as inline
        self.watch = _Watch()
        self.outcome: Outcome[T] | None = None


_local = threading.local()
_abandoned: list[threading.Thread] = []


def abandoned_threads() -> list[threading.Thread]:
    """Worker threads left running a hook past its deadline that have not ended yet."""
    _abandoned[:] = [thread for thread in _abandoned if thread.is_alive()]
    return list(_abandoned)


def guard(call: Callable[[], T], *, on_timeout: Callable[[float], BaseException]) -> T:
    """``call()`` (one hook call) under the deadline.

    Inside a :func:`run_all` worker the call runs inline and that worker's supervisor watches it;
    elsewhere it runs in a worker of its own. Past the deadline ``on_timeout(seconds)`` is raised
    in the caller, and the call is left running in its daemon thread.
    """
    watch: _Watch | None = getattr(_local, "watch", None)
    if watch is not None:
        watch.enter(on_timeout)
        try:
            return call()
        finally:
            watch.leave()
    timeout = hook_timeout()
    if timeout is None:
        return call()
    [outcome] = _supervise([lambda: guard(call, on_timeout=on_timeout)], timeout)
    return outcome.unwrap()


def run_all(functions: Sequence[Callable[[], T]]) -> list[Outcome[T]]:
    """Run ``functions`` concurrently (at most :data:`MAX_WORKERS` at a time), each hook call they
    make (through :func:`guard`) under the deadline; an outcome per function, in order.

    A function whose hook call passes its deadline gets that call's ``on_timeout`` error as its
    outcome. With no deadline (``ACCELCTL_HOOK_TIMEOUT=none``) they run one after the other here.
    """
    timeout = hook_timeout()
    if timeout is None:
        return [_run_inline(function) for function in functions]
    return _supervise(functions, timeout)


def _run_inline(function: Callable[[], T]) -> Outcome[T]:
    try:
        return Outcome(value=function())
    except BaseException as exc:  # handed to the caller, as a worker would
        return Outcome(error=exc)


def _supervise(functions: Sequence[Callable[[], T]], timeout: float) -> list[Outcome[T]]:
    lock = threading.Condition()
    tasks = [_Task(function) for function in functions]
    waiting: deque[_Task[T]] = deque(tasks)
    running: dict[_Task[T], threading.Thread] = {}
    left_to_do = [len(tasks)]  # tasks without an outcome; the supervisor wakes when it is 0

    def settle(task: _Task[T], outcome: Outcome[T]) -> None:
        task.outcome = outcome
        del running[task]
        left_to_do[0] -= 1
        if not left_to_do[0]:
            lock.notify_all()

    def work() -> None:
        while True:
            with lock:
                if not waiting:
                    return
                task = waiting.popleft()
                running[task] = threading.current_thread()
            _local.watch = task.watch
            outcome = task.context.run(_run_inline, task.function)
            with lock:
                if task.outcome is not None:  # abandoned past its deadline: this thread is done
                    return
                settle(task, outcome)

    def start_worker() -> None:
        threading.Thread(target=work, name="accelctl-hook", daemon=True).start()

    with lock:
        for _ in range(min(len(tasks), MAX_WORKERS)):
            start_worker()
        while left_to_do[0]:
            # Every hook call that runs now ends before its deadline or is given up at it: wake
            # then (a call that starts later has a later deadline, seen at the next wake).
            now = time.monotonic()
            wait = timeout
            for task, thread in list(running.items()):
                current = task.watch.current
                if current is None:
                    continue
                since, on_timeout = current
                left = since + timeout - now
                if left > 0:
                    wait = min(wait, left)
                    continue
                settle(task, Outcome(error=on_timeout(timeout)))
                _abandoned.append(thread)
                if waiting:
                    start_worker()  # in place of the stuck one
            if left_to_do[0]:
                lock.wait(wait)
    return [task.outcome for task in tasks if task.outcome is not None]

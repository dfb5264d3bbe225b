"""Which rank did not arrive at a collective that timed out, and what every rank was doing then.

When a collective times out (gloo raises in each process that waited, after
``ACCELCTL_COLLECTIVE_TIMEOUT``), the processes that gave up ask every process, through the
run's rendezvous store, where it is. Each process of a multi-process fit runs a watcher thread
that waits on that store (one pending request, ended with the fit; nothing per step) and answers
with its Python stack and its progress: how many points of the training loop it has passed (the
loop counts them, one attribute write each). The processes behind the others are the ones that
did not arrive. The first process to give up writes the report (a first line naming them, then
every rank's stack); the others repeat its first line, so that whichever one a launcher blames
names the same.

A process stuck in C code that holds Python's GIL cannot answer: the report says it did not.
NCCL's watchdog ends a process whose collective timed out without a Python exception, so this
report is gloo's (CPU) only; for NCCL see torch's own ``TORCH_NCCL_DUMP_ON_TIMEOUT``.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any

from .processes import ProcessEnvironment
from .timeouts import CollectiveTimeoutError, explain_timeout

#: Seconds the first rank that gave up waits for the others' answers (an answer takes
#: milliseconds; only a process that cannot answer costs this).
ANSWER_WAIT_S = 5.0
#: Frames of each stack shown (the innermost).
STACK_FRAMES = 12
_fits = itertools.count()  # store keys per fit: every rank of a run calls fit as often


@dataclass
class Progress:
    """Where this process is in its fit: set by the training loop, read by the watcher."""

    passed: int = 0
    where: str = "setting up"
    step: int = 0

    def mark(self, where: str, step: int) -> None:
        self.passed += 1
        self.where, self.step = where, step


class HangWatch:
    """The watcher thread of one fit's process, and the report of a collective that timed out."""

    def __init__(self, env: ProcessEnvironment, progress: Progress, run: str) -> None:
        self.env, self.progress = env, progress
        self._prefix = f"accelctl/hang/{run}/{next(_fits)}/"
        self._main = threading.get_ident()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watcher (where the rendezvous store's address is known)."""
        if self.env.master_addr and self.env.master_port:
            self._thread = threading.Thread(target=self._watch, name="accelctl-hang-watch")
            self._thread.daemon = True
            self._thread.start()

    def stop(self) -> None:
        """End the watcher before the fit returns: a thread still waiting on the store when the
        interpreter exits would abort the process once the store closes (C++ cannot unwind a
        daemon thread that Python stops)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopped.set()
        try:  # wake it: its question is answered "done"
            self._store(seconds=2).set(self._asked, "done")
        except Exception:
            pass  # the store is gone already: so is the watcher's wait
        thread.join(timeout=10)

    @property
    def _asked(self) -> str:
        return self._prefix + f"ask/{self.env.rank}"

    def _store(self, seconds: float = 30) -> Any:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        assert self.env.master_addr is not None and self.env.master_port is not None
        timeout = datetime.timedelta(seconds=seconds)
        return TCPStore(
            self.env.master_addr, self.env.master_port, timeout=timeout, wait_for_workers=False
        )

    def _watch(self) -> None:
        try:
            store = self._store()
            while not self._stopped.is_set():
                try:
                    store.wait([self._asked], datetime.timedelta(days=7))
                except Exception as exc:
                    if "timeout" in str(exc).lower():
                        continue
                    return  # the store is gone: the run is over
                if self._stopped.is_set() or store.get(self._asked) == b"done":
                    return
                frame = sys._current_frames().get(self._main)
                stack = traceback.format_stack(frame) if frame is not None else []
                store.set(self._prefix + f"answer/{self.env.rank}", self._answer(stack))
                return
        except Exception:
            return  # no watcher: a hang is reported without the names

    def _answer(self, stack: list[str]) -> str:
        where, step = self.progress.where, self.progress.step
        return json.dumps(
            {
                "passed": self.progress.passed,
                "where": f"{where} of step {step}",
                "who": f"pid {os.getpid()} on {socket.gethostname()}",
                "stack": "".join(stack[-STACK_FRAMES:]),
            }
        )

    def explain(
        self, error: BaseException, *, timeout: datetime.timedelta, step: int
    ) -> CollectiveTimeoutError | None:
        """The error a collective's timeout becomes (None when ``error`` is something else):
        naming the ranks that did not arrive, with every rank's stack, where the store answers;
        the plain timeout message otherwise."""
        env = self.env
        plain = explain_timeout(
            error, timeout=timeout, rank=env.rank, world_size=env.world_size, step=step
        )
        if plain is None or not (env.master_addr and env.master_port):
            return plain
        try:
            return self._report(error, timeout)
        except Exception:
            return plain

    def _report(self, error: BaseException, timeout: datetime.timedelta) -> CollectiveTimeoutError:
        store, prefix, me, world = self._store(), self._prefix, self.env.rank, self.env.world_size
        store.set(prefix + f"answer/{me}", self._answer(traceback.format_tb(error.__traceback__)))
        if store.add(prefix + "reporter", 1) != 1:  # another rank reports: repeat its verdict
            store.wait([prefix + "verdict"], datetime.timedelta(seconds=ANSWER_WAIT_S + 10))
            return CollectiveTimeoutError(store.get(prefix + "verdict").decode())
        for rank in range(world):
            if rank != me:
                store.set(prefix + f"ask/{rank}", "1")
        keys = [prefix + f"answer/{rank}" for rank in range(world)]
        try:
            store.wait(keys, datetime.timedelta(seconds=ANSWER_WAIT_S))
        except Exception:
            pass  # some did not answer: named as such
        answers = {
            rank: json.loads(store.get(key)) for rank, key in enumerate(keys) if store.check([key])
        }
        first = _verdict(answers, me, world, timeout.total_seconds())
        store.set(prefix + "verdict", f"{first}; rank {me}'s report shows every rank's stack")
        stacks = "".join(
            f"\nrank {rank} of {world} ({answer['who']}), in {answer['where']}:\n{answer['stack']}"
            for rank, answer in sorted(answers.items())
        )
        return CollectiveTimeoutError(f"{first}\nEvery rank's stack, innermost call last:{stacks}")


def _verdict(answers: dict[int, Any], me: int, world: int, seconds: float) -> str:
    """The report's first line: who did not arrive where the others waited."""
    top = max(answer["passed"] for answer in answers.values())
    behind = [f"rank {r} is in {a['where']}" for r, a in answers.items() if a["passed"] < top]
    silent = [
        f"rank {r} did not answer (dead, unreachable, or stuck holding Python's GIL)"
        for r in range(world)
        if r not in answers
    ]
    waited = answers[me]["where"]
    if not behind and not silent:
        return (
            f"every rank of {world} reached {waited} and waited {seconds:g} s in a collective "
            f"that did not complete: a network problem, or a rank works longer than "
            f"ACCELCTL_COLLECTIVE_TIMEOUT allows (raise it, in seconds)"
        )
    missing = sorted(r for r in range(world) if r not in answers or answers[r]["passed"] < top)
    names = ", ".join(str(r) for r in missing)
    return (
        f"rank{'s' if len(missing) > 1 else ''} {names} of {world} did not arrive: rank {me} "
        f"waited {seconds:g} s for {'them' if len(missing) > 1 else 'it'} in {waited} and gave "
        f"up; {'; '.join(behind + silent)} (if it only works longer alone, raise "
        f"ACCELCTL_COLLECTIVE_TIMEOUT, in seconds)"
    )

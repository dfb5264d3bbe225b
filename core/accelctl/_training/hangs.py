"""Which rank did not arrive at a collective that timed out, and what every rank was doing then.

Each process runs a watcher thread waiting on the run's rendezvous store (per step the loop only
counts the points it passes). The first process whose collective times out asks every watcher
for its stack and count; those behind the others did not arrive (docs/training.md,
"Supervision"). The other processes that gave up repeat its first line. gloo's timeouts only:
NCCL's watchdog ends a process before Python sees one.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import os
import socket
import threading
import traceback
from dataclasses import dataclass
from typing import Any

from .._choice.process_environment import ProcessEnvironment
from .timeouts import CollectiveTimeoutError, explain_timeout

#: Seconds the reporter waits for answers (they take milliseconds, unless a process cannot).
ANSWER_WAIT_S = 5.0
STACK_FRAMES = 12  # the innermost frames of each stack shown
#: Store keys per fit in a group the fit did not make (a user's own): every rank of such a run
#: calls fit as often. A group the fit made has a number all ranks agree on (:mod:`.processes`).
_fits = itertools.count()


@dataclass
class Progress:
    """Where this process is in its fit: set by the training loop, read by the watcher."""

    passed: int = 0
    where: str = "setting up"
    step: int = 0

    def mark(self, where: str, step: int) -> None:
        self.passed, self.where, self.step = self.passed + 1, where, step


class HangWatch:
    """The watcher thread of one fit's process, and the report of a collective that timed out."""

    def __init__(self, env: ProcessEnvironment, progress: Progress, restarts: int) -> None:
        self.env, self.progress, self._restarts = env, progress, restarts
        self._prefix = self._asked = ""  # the fit's keys, known once its group is
        self._main = threading.get_ident()
        self._thread: threading.Thread | None = None

    def start(self, group: int | None = None) -> None:
        """Start the watcher (where the rendezvous store's address is known).

        :param group: the number of the process group the fit made (None: the user's own).
        """
        # The same in every process of the run (a run's store can outlive a restart).
        fit = f"group{group}" if group is not None else str(next(_fits))
        self._prefix = f"accelctl/hang/{self._restarts}/{fit}/"
        self._asked = self._prefix + f"ask/{self.env.rank}"
        if self.env.master_addr and self.env.master_port:
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the watcher before the fit returns.

        A thread still waiting on the store aborts the process at exit."""
        thread, self._thread = self._thread, None
        if thread is not None:
            # Its question, answered "done" (where the store is gone, so is the watcher's wait).
            with contextlib.suppress(Exception):
                self._store(seconds=2).set(self._asked, "done")
            thread.join(timeout=10)

    def _store(self, seconds: float = 30) -> Any:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        timeout = datetime.timedelta(seconds=seconds)
        addr, port = self.env.master_addr or "", int(self.env.master_port or 0)
        return TCPStore(addr, port, timeout=timeout, wait_for_workers=False)

    def _watch(self) -> None:
        try:
            store = self._store()
            while True:
                try:
                    store.wait([self._asked], datetime.timedelta(days=7))
                    break
                except Exception as exc:
                    if "timeout" not in str(exc).lower():
                        return  # the store is gone: the run is over
            if store.get(self._asked) != b"done":
                stack = thread_stack(self._main)
                store.set(self._prefix + f"answer/{self.env.rank}", self._answer(stack))
        except Exception:
            return  # no watcher: a hang is reported without the names

    def _answer(self, stack: list[str]) -> str:
        return json.dumps(
            {
                "passed": self.progress.passed,
                "where": f"{self.progress.where} of step {self.progress.step}",
                "who": f"pid {os.getpid()} on {socket.gethostname()}",
                "stack": "".join(stack[-STACK_FRAMES:]),
            }
        )

    def explain(
        self, error: BaseException, *, timeout: datetime.timedelta, step: int
    ) -> CollectiveTimeoutError | None:
        """Return the error a collective's timeout becomes, or None for any other error.

        The ranks that did not arrive and every rank's stack where the store answers, else the plain
        timeout."""
        env, prefix = self.env, self._prefix
        plain = explain_timeout(
            error, timeout=timeout, rank=env.rank, world_size=env.world_size, step=step
        )
        if plain is None or self._thread is None:
            return plain
        try:
            store, me, world = self._store(), env.rank, env.world_size
            stack = traceback.format_tb(error.__traceback__)  # where it waited
            store.set(prefix + f"answer/{me}", self._answer(stack))
            if store.add(prefix + "reporter", 1) != 1:  # another rank reports: its first line
                store.wait([prefix + "verdict"], datetime.timedelta(seconds=ANSWER_WAIT_S + 10))
                return CollectiveTimeoutError(store.get(prefix + "verdict").decode())
            for rank in set(range(world)) - {me}:
                store.set(prefix + f"ask/{rank}", "1")
            keys = [prefix + f"answer/{rank}" for rank in range(world)]
            with contextlib.suppress(Exception):  # some did not answer: named as such
                store.wait(keys, datetime.timedelta(seconds=ANSWER_WAIT_S))
            answers = {r: json.loads(store.get(k)) for r, k in enumerate(keys) if store.check([k])}
        except Exception:
            return plain
        first = _verdict(answers, me, world, timeout.total_seconds())
        store.set(prefix + "verdict", f"{first}; rank {me}'s report shows every rank's stack")
        stacks = "".join(
            f"\nrank {rank} of {world} ({answer['who']}), in {answer['where']}:\n{answer['stack']}"
            for rank, answer in sorted(answers.items())
        )
        return CollectiveTimeoutError(f"{first}\nEvery rank's stack, innermost call last:{stacks}")


def thread_stack(ident: int) -> list[str]:
    """Return the stack of the thread ``ident`` of this process.

    As :func:`traceback.format_stack` gives it (innermost call last), read through
    :mod:`faulthandler`, the public way to read another thread's stack; empty where it cannot be
    read."""
    import faulthandler
    import linecache
    import re
    import tempfile

    with tempfile.TemporaryFile("w+") as dump:
        faulthandler.dump_traceback(dump, all_threads=True)
        dump.seek(0)
        text = dump.read()
    # Sections "Thread 0x...", or "Current thread 0x..." (most recent call first), then lines
    # '  File "path", line N in name'.
    lines: list[str] = []
    inside = False
    for line in text.splitlines():
        head = re.match(r"(?:Current thread|Thread) (0x[0-9a-f]+)", line)
        if head is not None:
            inside = int(head.group(1), 16) == ident
            continue
        frame = re.match(r'\s+File "(.*)", line (\d+) in (.*)', line) if inside else None
        if frame is not None:
            path, number, name = frame.group(1), int(frame.group(2)), frame.group(3)
            source = linecache.getline(path, number).strip()
            lines.append(
                f'  File "{path}", line {number}, in {name}\n'
                + (f"    {source}\n" if source else "")
            )
    return lines[::-1]


def _verdict(answers: dict[int, Any], me: int, world: int, seconds: float) -> str:
    """The report's first line: who did not arrive where the others waited."""
    top = max(answer["passed"] for answer in answers.values())
    missing = [r for r in range(world) if r not in answers or answers[r]["passed"] < top]
    waited = answers[me]["where"]
    if not missing:
        return (
            f"every rank of {world} reached {waited} and waited {seconds:g} s in a collective "
            f"that did not complete: a network problem, or a rank works longer than "
            f"ACCELCTL_COLLECTIVE_TIMEOUT allows (raise it, in seconds)"
        )
    where = [
        f"rank {r} is in {answers[r]['where']}"
        if r in answers
        else f"rank {r} did not answer (dead, unreachable, or stuck holding Python's GIL)"
        for r in missing
    ]
    many = len(missing) > 1
    return (
        f"rank{'s' if many else ''} {', '.join(map(str, missing))} of {world} did not arrive: "
        f"rank {me} waited {seconds:g} s for {'them' if many else 'it'} in {waited} and gave up; "
        f"{'; '.join(where)} (if it only works longer alone, raise ACCELCTL_COLLECTIVE_TIMEOUT, "
        f"in seconds)"
    )

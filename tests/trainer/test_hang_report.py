"""The parts of a hang's report on their own: who did not arrive, and the warning signal passed on.

The launcher passes a scheduler's warning signal on. The whole report, from a real hang, is in
``test_supervision.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from accelctl._training.hangs import Progress, _verdict
from accelctl.launcher import RankFailure


def answer(passed: int, where: str) -> dict[str, object]:
    return {"passed": passed, "where": where, "who": "pid 1 on n1", "stack": ""}


def test_the_ranks_behind_the_others_are_the_ones_that_did_not_arrive() -> None:
    answers = {0: answer(9, "backward of step 3"), 1: answer(8, "training_step of step 3")}
    answers[2] = answer(9, "backward of step 3")
    assert _verdict(answers, 0, 4, 3.0) == (
        "ranks 1, 3 of 4 did not arrive: rank 0 waited 3 s for them in backward of step 3 and gave "
        "up; rank 1 is in training_step of step 3; rank 3 did not answer (dead, unreachable, or "
        "stuck holding Python's GIL) (if it only works longer alone, raise "
        "ACCELCTL_COLLECTIVE_TIMEOUT, in seconds)"
    )


def test_when_every_rank_arrived_the_collective_itself_is_blamed() -> None:
    answers = {rank: answer(5, "the figures' all-reduce of step 2") for rank in (0, 1)}
    assert _verdict(answers, 1, 2, 300.0).startswith(
        "every rank of 2 reached the figures' all-reduce of step 2 and waited 300 s in a "
        "collective that did not complete: a network problem"
    )


def test_progress_counts_the_points_passed() -> None:
    progress = Progress()
    progress.mark("training_step", 1)
    progress.mark("backward", 1)
    assert (progress.passed, progress.where, progress.step) == (2, "backward", 1)


def test_the_launch_report_keeps_the_first_line_of_a_childs_error() -> None:
    failure = RankFailure(0, 2, 1, "CollectiveTimeoutError: rank 1 of 2 did not arrive\nstacks")
    assert failure.describe() == (
        "rank 0 of 2 failed (exit code 1): CollectiveTimeoutError: rank 1 of 2 did not arrive"
    )


def test_a_launcher_passes_sigusr1_and_sigusr2_on_to_its_processes() -> None:
    """In a process of its own: the signal goes to every child of the test process otherwise."""
    program = """
        import os, signal, subprocess, sys
        from accelctl._launching.supervision import forwarding_user_signals

        child = subprocess.Popen([sys.executable, "-c", '''
        import signal, sys, time
        got = []
        for signum in (signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(signum, lambda signum, frame: got.append(signal.Signals(signum).name))
        print("ready", flush=True)
        for _ in range(600):
            if len(got) == 2:
                break
            time.sleep(0.05)
        print(" ".join(got))
        '''], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "ready\\n"
        with forwarding_user_signals():
            os.kill(os.getpid(), signal.SIGUSR1)  # the launcher lives on, its child gets it
            os.kill(os.getpid(), signal.SIGUSR2)
            print(child.communicate(timeout=60)[0].strip())
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # a hang guard
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["SIGUSR1", "SIGUSR2"]  # in either order

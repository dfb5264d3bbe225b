"""``accelctl launch`` supervises its processes: failures named, hangs ended, restarts exact.

The first failure is named, a hang ends, the workers die with their launcher, Ctrl-C stops
everything, and --max-restarts resumes exactly.

The launches are real (torchrun, gloo, signals). Every wait has a generous bound: it guards
against a hang on a loaded 2-core machine and is not a performance assertion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parent / "supervised_script.py"
#: Hang guard for a whole launch (torch's import and a rendezvous take seconds on a busy machine).
LAUNCH_TIMEOUT_S = 240


def launcher(
    out: Path, mode: str, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    out.mkdir(parents=True, exist_ok=True)
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("ACCELCTL_", "TORCHELASTIC"))
    }
    command = [sys.executable, "-c", "from accelctl.cli import main; main()", "launch", "--cpu"]
    return subprocess.Popen(
        [*command, *options, str(SCRIPT), str(out), mode],
        env={**environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=LAUNCH_TIMEOUT_S)  # hang guard
    except subprocess.TimeoutExpired:
        process.kill()  # its workers die with it
        process.communicate()
        raise
    return process.returncode, stderr


def report(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def wait_for_pids(
    process: subprocess.Popen[str], out: Path, ranks: int, timeout: float = LAUNCH_TIMEOUT_S
) -> list[int]:
    """The pids the script wrote at its start (the bound is a hang guard)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the launch ended early: {process.communicate()}")
        files = [out / f"pid{rank}" for rank in range(ranks)]
        if all(f.exists() and f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.2)
    raise AssertionError(f"the script did not start within {timeout} s")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_dead(pids: list[int], timeout: float = 60) -> list[int]:
    """The pids still alive after ``timeout`` seconds (a hang guard: they should go at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


@pytest.mark.slow
def test_a_killed_rank_is_the_one_reported_with_its_signal(tmp_path: Path) -> None:
    code, stderr = finish(launcher(tmp_path, "kill", "--devices", "2"))
    assert code == 137, stderr
    assert report(stderr) == (
        "accelctl launch: rank 1 of 2 failed (killed by SIGKILL): stopped by a signal (out of "
        "memory? killed by the system?); the other processes were stopped"
    )


#: The collective timeout of the hung-rank test (see there).
COLLECTIVE_TIMEOUT_S = 20


@pytest.mark.slow
def test_a_hung_rank_is_named_with_every_ranks_stack_after_the_collective_timeout(
    tmp_path: Path,
) -> None:
    # The timeout every collective gets: the hung rank's partner waits it out once, and each
    # step before the hang must fit in it too, so it is generous for a loaded machine (3 s was
    # once exceeded by step 0 on a 2-core machine running two test sessions at once).
    env = {"ACCELCTL_COLLECTIVE_TIMEOUT": str(COLLECTIVE_TIMEOUT_S)}
    code, stderr = finish(launcher(tmp_path, "hang", "--devices", "2", env=env))
    assert code == 1, stderr
    line = report(stderr)
    # The rank that hung is named (not the one that timed out), with where each one is.
    # An accelctl error: its first line is the launch's one line, without a rank's traceback.
    assert line.startswith(
        f"accelctl launch: rank 1 of 2 did not arrive: rank 0 waited {COLLECTIVE_TIMEOUT_S} s for "
        "it in backward (the gradients' all-reduce) of step 3 and gave up; rank 1 is in "
        "training_step of step 3"
    ), line
    assert line.endswith("ACCELCTL_COLLECTIVE_TIMEOUT, in seconds) (ACCELCTL_DEBUG=1 shows the "
                         "traceback)"), line  # fmt: skip
    assert "Traceback" not in stderr and "CollectiveTimeoutError" not in stderr, stderr
    # Every rank's Python stack at that moment, printed once, by the rank that gave up first.
    assert stderr.count("Every rank's stack, innermost call last:") == 1, stderr
    hung = stderr[stderr.index("rank 1 of 2 (pid ") :]
    assert "in training_step of step 3:" in hung.splitlines()[0]
    assert "time.sleep(600)" in hung  # the line rank 1 hangs on
    assert "rank 0 of 2 (pid " in stderr


@pytest.mark.slow
def test_workers_die_with_a_killed_launcher(tmp_path: Path) -> None:
    process = launcher(tmp_path, "sleep", "--devices", "2")
    try:
        pids = wait_for_pids(process, tmp_path, 2)
        process.kill()  # SIGKILL: the launcher cannot pass anything on
        process.wait(timeout=30)
        assert wait_until_dead(pids) == []
    finally:
        process.kill()
        process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("devices", "mode"),
    [("1", "sleep"), ("1", "stubborn"), ("2", "sleep")],
    ids=["one-process", "one-process-ignoring-sigint", "torchrun"],
)
def test_sigint_to_the_launcher_stops_everything_with_130(
    tmp_path: Path, devices: str, mode: str
) -> None:
    process = launcher(tmp_path, mode, "--devices", devices)
    try:
        pids = wait_for_pids(process, tmp_path, int(devices))
        process.send_signal(signal.SIGINT)  # to the launcher only, as `kill -INT` does
        code, stderr = finish(process)
        assert code == 130, stderr
        assert report(stderr) == (
            "accelctl launch: interrupted by Ctrl-C; the launched processes were stopped"
        )
        assert wait_until_dead(pids, timeout=5) == []  # gone when the launcher returned
    finally:
        process.kill()


@pytest.mark.slow
def test_ctrl_c_is_one_line_naming_the_last_checkpoint_and_the_command_that_resumes(
    tmp_path: Path,
) -> None:
    process = launcher(tmp_path, "interruptible", "--devices", "2")
    try:
        wait_for_pids(process, tmp_path, 2)
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S  # hang guard
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        code, stderr = finish(process)
    finally:
        process.kill()
    assert code == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr  # not one per rank
    last = (tmp_path / "checkpoints" / "run-0" / "last.ckpt").resolve()
    command = f"accelctl launch --accelerator cpu --devices 2 {SCRIPT} {tmp_path} interruptible"
    assert report(stderr) == (
        "accelctl launch: interrupted by Ctrl-C; the launched processes were stopped; the last "
        f"checkpoint is {last} (epoch 1, step 4); to resume from it: ACCELCTL_CKPT_PATH={last} "
        f"{command}"
    )
    # The command it gives continues the run (the variable stands for fit's ckpt_path).
    code, stderr = finish(launcher(tmp_path, "train", "--devices", "2", env={
        "ACCELCTL_CKPT_PATH": str(last)}))  # fmt: skip
    assert code == 0, stderr
    assert f"resumed from {last}: the start of epoch 2 of 3, step 4" in stderr
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    assert {line["run"] for line in lines} == {"run-0"}  # the same run, continued
    assert [line["step"] for line in lines if line["kind"] == "epoch"] == [4, 8, 12]


@pytest.mark.slow
def test_max_restarts_resumes_a_killed_group_to_the_same_weights(tmp_path: Path) -> None:
    code, stderr = finish(launcher(tmp_path / "whole", "train", "--devices", "2"))
    assert code == 0, stderr
    code, stderr = finish(
        launcher(tmp_path / "cut", "kill-once", "--devices", "2", "--max-restarts", "1")
    )
    assert code == 0, stderr
    assert (tmp_path / "cut" / "killed-once").exists()  # rank 1 was killed, once
    for rank in (0, 1):
        whole = torch.load(tmp_path / "whole" / f"final{rank}.pt", weights_only=True)
        cut = torch.load(tmp_path / "cut" / f"final{rank}.pt", weights_only=True)
        for key in whole:
            assert torch.equal(whole[key], cut[key]), (rank, key)
    lines = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").open()]
    assert {line["restart"] for line in lines} == {0, 1}
    assert len({line["run"] for line in lines}) == 1  # one launch
    assert lines[-1]["kind"] == "epoch" and lines[-1]["step"] == 12

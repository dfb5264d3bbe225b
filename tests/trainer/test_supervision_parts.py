"""The parts of supervision that need no launch: the collective timeout, the parent-death set-up."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import textwrap

import pytest

from accelctl._launching.supervision import (
    ENV_LAUNCHER_PID,
    LaunchInterruptedError,
    die_with_launcher,
)
from accelctl._training.processes import ProcessSetupError
from accelctl._training.timeouts import (
    DEFAULT_TIMEOUT_S,
    ENV_COLLECTIVE_TIMEOUT,
    collective_timeout,
    explain_timeout,
)


def test_the_collective_timeout_defaults_to_five_minutes_and_reads_its_variable() -> None:
    assert (
        collective_timeout({})
        == datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
        != (
            datetime.timedelta(minutes=30)  # torch's default, which hides a hang for half an hour
        )
    )
    assert collective_timeout({ENV_COLLECTIVE_TIMEOUT: " 2.5 "}).total_seconds() == 2.5


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf"])
def test_a_bad_collective_timeout_is_refused_with_what_is_accepted(raw: str) -> None:
    with pytest.raises(ProcessSetupError, match=f"{ENV_COLLECTIVE_TIMEOUT}='{raw}'.*> 0"):
        collective_timeout({ENV_COLLECTIVE_TIMEOUT: raw})


def test_only_a_timeout_is_explained_as_one() -> None:
    timeout = datetime.timedelta(seconds=4)
    gloo = RuntimeError(
        "[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 4000ms for recv"
    )
    explained = explain_timeout(gloo, timeout=timeout, rank=0, world_size=2, step=3)
    assert explained is not None
    assert str(explained).startswith(
        "rank 0 of 2 waited 4 s in a collective after optimizer step 3 and gave up"
    )
    assert str(explained).endswith("torch: " + str(gloo))
    other = RuntimeError("Connection closed by peer")
    assert explain_timeout(other, timeout=timeout, rank=0, world_size=2, step=3) is None
    assert (
        explain_timeout(KeyboardInterrupt(), timeout=timeout, rank=0, world_size=2, step=3) is None
    )


def test_an_interrupted_launch_exits_as_a_shell_reports_the_signal() -> None:
    import signal

    assert LaunchInterruptedError(signal.SIGINT).exit_code == 130
    assert "Ctrl-C" in str(LaunchInterruptedError(signal.SIGINT))
    assert LaunchInterruptedError(signal.SIGTERM).exit_code == 143


def test_a_process_not_started_by_accelctl_is_left_alone() -> None:
    assert die_with_launcher({}) is None
    assert die_with_launcher({ENV_LAUNCHER_PID: "not a pid"}) is None


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_of_the_launcher_asks_linux_for_a_parent_death_signal() -> None:
    # In a child of this process, so that the set-up does not outlive the test in pytest itself.
    code = textwrap.dedent(
        """
        import ctypes, os
        from accelctl._launching.supervision import die_with_launcher
        how = die_with_launcher({"ACCELCTL_LAUNCHER_PID": str(os.getppid())})
        signum = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(signum), 0, 0, 0)  # PR_GET_PDEATHSIG
        print(how, signum.value)
        """
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout  # timeout: a hang guard
    assert output.split() == ["pdeathsig", "9"]


@pytest.mark.slow
def test_a_child_whose_launcher_already_died_ends_itself() -> None:
    # The variable names a process that is not the parent and does not exist any more.
    code = (
        "from accelctl._launching.supervision import die_with_launcher; "
        "die_with_launcher(); print('ran')"
    )
    finished = subprocess.run(  # timeout: a hang guard
        [sys.executable, "-c", code],
        env={**os.environ, ENV_LAUNCHER_PID: str(2**22 + 12345)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == -9 and "ran" not in finished.stdout


def test_max_restarts_must_be_a_count(tmp_path: object) -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from accelctl.cli.main import cli

    script = Path(str(tmp_path)) / "s.py"
    script.write_text("")
    result = CliRunner().invoke(cli, ["launch", "--max-restarts", "-1", str(script)])
    assert result.exit_code == 2
    assert "--max-restarts" in result.output and "-1" in result.output

"""accelctl's error that ends a program is one line on standard error.

Any :class:`accelctl.AccelctlError`, shown by rank 0 alone, its traceback behind
``ACCELCTL_DEBUG=1``; a Ctrl-C the fit already reported ends without a traceback; other errors keep
Python's display.
"""

from __future__ import annotations

import os
import sys

import pytest

import accelctl
from accelctl._launching import error_line as _error_line
from accelctl._launching.error_line import reported, show_as_one_line

REFUSAL = "this fit would continue run run-0, which another fit is writing now"


@pytest.fixture(autouse=True)
def _excepthook_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(_error_line, "_quiet", False)
    monkeypatch.setattr(_error_line, "_carriers", [])
    for name in list(os.environ):  # this process runs alone, whatever started the tests
        if name.startswith(("RANK", "LOCAL_", "WORLD_", "OMPI_", "SLURM_", "MASTER_", "ACCELCTL_")):
            monkeypatch.delenv(name, raising=False)


def end_on(error: BaseException) -> None:
    """What Python does with ``error`` when it ends the program."""
    sys.excepthook(type(error), error, error.__traceback__)


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as exc:
        return exc


def test_every_accelctl_error_is_one_line_with_the_switch_that_shows_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_as_one_line()
    end_on(raised(accelctl.TrainerError(REFUSAL + "; wait for it to end")))
    assert capsys.readouterr().err == (
        f"accelctl: {REFUSAL}; wait for it to end (ACCELCTL_DEBUG=1 shows the traceback)\n"
    )


def test_a_message_of_several_lines_keeps_them_and_the_switch_follows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A message laid out on several lines is shown as written, the switch after it on its own line.

    The message is a command to run; the switch is not put inside it.
    """
    show_as_one_line()
    end_on(raised(accelctl.ProcessSetupError("started alone. Run:\n    accelctl launch x.py")))
    assert capsys.readouterr().err == (
        "accelctl: started alone. Run:\n    accelctl launch x.py\n"
        "(ACCELCTL_DEBUG=1 shows the traceback)\n"
    )


def test_the_switch_shows_the_traceback_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_DEBUG", "1")
    show_as_one_line()
    end_on(raised(accelctl.ProcessSetupError(REFUSAL)))
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "ProcessSetupError" in err
    assert err.endswith(f"accelctl: {REFUSAL} (ACCELCTL_DEBUG=1 shows the traceback)\n")


TORCHRUN = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
MPIRUN = {
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


@pytest.mark.parametrize(
    ("launched", "shown"),
    [
        ({**TORCHRUN, "RANK": "0", "LOCAL_RANK": "0"}, True),
        ({**TORCHRUN, "RANK": "1", "LOCAL_RANK": "1"}, False),  # torchrun's, accelerate launch's
        ({**MPIRUN, "OMPI_COMM_WORLD_RANK": "1"}, False),
        ({}, True),  # alone
    ],
    ids=["torchrun-rank-0", "torchrun-rank-1", "mpirun-rank-1", "alone"],
)  # fmt: skip
def test_a_launchers_rank_other_than_0_ends_without_a_word(
    launched: dict[str, str],
    shown: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in launched.items():
        monkeypatch.setenv(name, value)
    show_as_one_line()
    end_on(raised(accelctl.TrainerError(REFUSAL)))
    assert (capsys.readouterr().err != "") is shown


def test_a_reported_ctrl_c_ends_without_a_traceback_and_another_keeps_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    interrupt = raised(KeyboardInterrupt())
    reported(interrupt)
    end_on(interrupt)
    assert capsys.readouterr().err == ""
    end_on(raised(KeyboardInterrupt()))  # one the user's own code met after the fit
    assert "Traceback" in capsys.readouterr().err


def test_other_errors_keep_pythons_display(capsys: pytest.CaptureFixture[str]) -> None:
    show_as_one_line()
    end_on(raised(ValueError("the user's own")))
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: the user's own" in err
    assert "accelctl:" not in err


TRAINER_REFUSED = """
import accelctl
accelctl.Trainer(accelerator="cpu", devices=2)  # several devices, started alone
"""


@pytest.mark.slow  # an interpreter that imports torch
def test_a_trainer_refused_when_made_ends_the_script_without_a_traceback() -> None:
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELCTL_", "RANK"))}
    done = subprocess.run(
        [sys.executable, "-c", TRAINER_REFUSED],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard: an interpreter, torch's import
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "ProcessSetupError" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("accelctl: devices=2 ") and "started alone" in lines[0], lines
    assert lines[-1] == "(ACCELCTL_DEBUG=1 shows the traceback)"

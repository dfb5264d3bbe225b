"""accelctl's error that ends a program is one line on standard error (issue 46, item 2): any
:class:`accelctl.AccelctlError`, shown by rank 0 alone, its traceback behind ``ACCELCTL_DEBUG=1``;
a Ctrl-C the fit already reported ends without a traceback; other errors keep Python's display."""

from __future__ import annotations

import sys

import pytest

import accelctl
from accelctl import _error_line
from accelctl._error_line import reported, show_as_one_line

REFUSAL = "this fit would continue run run-0, which another fit is writing now"


@pytest.fixture(autouse=True)
def _excepthook_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(_error_line, "_quiet", False)
    monkeypatch.setattr(_error_line, "_carriers", [])
    monkeypatch.setattr(_error_line, "_reported", [])
    for name in ("RANK", "ACCELCTL_DEBUG"):
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


def test_a_message_of_several_lines_ends_with_its_first_as_the_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a message says after its first line (a hang's stacks of every rank) comes above the
    one line, which stays the last."""
    show_as_one_line()
    end_on(raised(accelctl.TrainerError("rank 1 of 2 did not arrive\nrank 1: File x, line 3")))
    assert capsys.readouterr().err == (
        "rank 1: File x, line 3\n"
        "accelctl: rank 1 of 2 did not arrive (ACCELCTL_DEBUG=1 shows the traceback)\n"
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


@pytest.mark.parametrize(("rank", "shown"), [("0", True), ("1", False), (None, True)])
def test_a_launchers_rank_other_than_0_ends_without_a_word(
    rank: str | None,
    shown: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if rank is not None:
        monkeypatch.setenv("RANK", rank)  # torchrun's, accelerate launch's
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

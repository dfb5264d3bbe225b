"""What a bridge adds to accelctl's one line for a missing kernel.

The way to the CPU in its framework's words (``cpu_way``), a process that leaves the line to another
one of its launch (``quiet``), and an error found inside a framework's own (``carried``).
"""

from __future__ import annotations

import pickle
import sys

import pytest

import accelctl
from accelctl._kernels.translate import show_as_one_line
from accelctl._launching import error_line as _error_line

WAY = 'pass accelerator="cpu" to lightning.Trainer'


def missing(**parts: str) -> accelctl.MissingKernelError:
    return accelctl.MissingKernelError(
        op="aten::convolution", device="openreg:0", accelerator="privateuse1", **parts
    )


@pytest.fixture(autouse=True)
def _excepthook_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(_error_line, "_quiet", False)
    monkeypatch.setattr(_error_line, "_carriers", [])


def test_a_frameworks_way_to_the_cpu_replaces_accelctls_in_every_form() -> None:
    error = missing(cpu_way=WAY)
    assert f"to train on the CPU, {WAY}; to run the kernels" in str(error)
    assert "ACCELCTL_ACCELERATOR" not in str(error)
    command = error.for_command(["python", "train.py"])
    assert f"to train on the CPU, {WAY}; " in command
    assert "ACCELCTL_CPU_FALLBACK=1 python train.py" in command
    launched = error.for_launch("accelctl launch --cpu train.py", "accelctl launch train.py")
    assert f"to train on the CPU, {WAY}; " in launched and "--cpu" not in launched
    # accelctl's own where the error has none.
    plain = missing().for_command(["python", "train.py"])
    assert "to train on the CPU, ACCELCTL_ACCELERATOR=cpu python train.py; " in plain


def test_the_way_travels_with_the_errors_parts_and_pickles() -> None:
    error = missing(cpu_way=WAY)
    assert accelctl.MissingKernelError.from_parts(error.parts()).cpu_way == WAY
    again = pickle.loads(pickle.dumps(error))
    assert (again.cpu_way, str(again)) == (WAY, str(error))


def test_a_quiet_process_ends_on_the_error_without_a_word(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_as_one_line(quiet=True)
    error = missing()
    sys.excepthook(type(error), error, None)
    assert capsys.readouterr().err == ""


def test_an_error_a_frameworks_own_carries_is_shown_as_the_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class WorkersFailed(Exception):
        def __init__(self, error: Exception) -> None:
            super().__init__("a traceback per worker")
            self.error = error

    def carried(exc: BaseException) -> accelctl.MissingKernelError | None:
        found = getattr(exc, "error", None)
        return found if isinstance(found, accelctl.MissingKernelError) else None

    show_as_one_line(carried=carried)
    error = missing(cpu_way=WAY)
    wrapper = WorkersFailed(error)
    sys.excepthook(type(wrapper), wrapper, None)
    assert capsys.readouterr().err == f"accelctl: {error.for_command(sys.orig_argv)}\n"
    other = WorkersFailed(ValueError("own"))
    sys.excepthook(type(other), other, None)
    assert "WorkersFailed: a traceback per worker" in capsys.readouterr().err


def test_a_carrier_that_breaks_leaves_pythons_own_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken(exc: BaseException) -> accelctl.MissingKernelError | None:
        raise KeyError("a carrier's own bug")

    show_as_one_line(carried=broken)
    error = ValueError("the program's")
    sys.excepthook(type(error), error, None)
    assert "ValueError: the program's" in capsys.readouterr().err

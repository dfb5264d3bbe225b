"""A missing kernel on Lightning's path: one line, or the CPU's weights with the fallback.

Without ``ACCELCTL_CPU_FALLBACK`` the fit stops with accelctl's one line naming the operator and
the layer, and no traceback: in one process, under Lightning's own DDP on 2 devices (rank 0's
line for the launch) and under ``accelctl launch --devices 2`` (the launcher's). With it, the
convolution runs on the CPU and the fit ends with the weights of the same fit on the CPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from openregmachine import UserMachine, succeeded
from rankresults import assert_equal

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("lightning")

SCRIPT = Path(__file__).parents[1] / "openreg" / "lightning_kernels_run.py"
#: What every line names: the operator, the device and its plugin, the layer.
WHAT = (
    "aten::convolution has no kernel for openreg:{rank} (plugin privateuse1), called by Conv2d "
    "at features.0"
)
#: The way to the CPU in Lightning's words: its Trainer takes the accelerator.
ON_CPU = 'to train on the CPU, pass accelerator="cpu" to lightning.Trainer'


def run(
    machine: UserMachine, out: Path, accelerator: str, devices: int, *launch: str, **env: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *launch, str(SCRIPT), str(out), accelerator, str(devices)]
    return machine.run(*command, cwd=out.parent, **env)


def accelctl_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines of accelctl's own on standard error (the script's, or the launcher's)."""
    return [
        line
        for line in done.stderr.splitlines()
        if line.startswith(("accelctl: ", "accelctl launch: "))
    ]


def assert_stopped_with_one_line(done: subprocess.CompletedProcess[str]) -> str:
    """Exit 1, accelctl's one line, and neither a traceback nor torch's message."""
    assert done.returncode == 1, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    assert "convolution_overrideable" not in done.stderr
    [line] = accelctl_lines(done)
    return line


def test_a_missing_convolution_stops_the_fit_with_accelctls_one_line(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    done = run(occl_machine, tmp_path / "out", "openreg", 1)
    line = assert_stopped_with_one_line(done)
    command = f"{sys.executable} {SCRIPT} {tmp_path / 'out'} openreg 1"
    assert line == (
        f"accelctl: {WHAT.format(rank=0)}: {ON_CPU}; to run the kernels the device lacks on the "
        f"CPU, ACCELCTL_CPU_FALLBACK=1 {command} (ACCELCTL_DEBUG=1 shows the traceback)"
    )
    assert not (tmp_path / "out" / "weights.pt").exists()


def test_the_debug_switch_shows_the_traceback_behind_the_line(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    done = run(occl_machine, tmp_path / "out", "openreg", 1, ACCELCTL_DEBUG="1")
    assert done.returncode == 1
    assert "convolution_overrideable not implemented" in done.stderr  # torch's, the cause
    assert "accelctl.MissingKernelError: " in done.stderr
    assert len(accelctl_lines(done)) == 1


def test_the_cpu_fallback_trains_to_the_cpu_fits_weights_exactly(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    fallback = run(occl_machine, tmp_path / "openreg", "openreg", 1, ACCELCTL_CPU_FALLBACK="1")
    succeeded(fallback)
    succeeded(run(occl_machine, tmp_path / "cpu", "cpu", 1))
    # Named once, in the process's one warning for that operator.
    assert fallback.stderr.count("aten::convolution has no kernel for openreg:0: it runs on") == 1
    on_openreg = torch.load(tmp_path / "openreg" / "weights.pt")
    assert_equal(on_openreg, torch.load(tmp_path / "cpu" / "weights.pt"))
    assert not torch.equal(on_openreg["features.0.weight"], _initial()["features.0.weight"])


def _initial() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 4, 3)
    return {"features.0.weight": conv.weight.detach()}


@pytest.mark.parametrize(
    "launch",
    [
        pytest.param((), id="lightnings-own-ddp"),
        pytest.param(
            ("-m", "accelctl", "launch", "--accelerator", "openreg", "--devices", "2"),
            id="accelctl-launch",
        ),
    ],
)
def test_two_devices_stop_with_one_line_for_the_launch(
    occl_machine: UserMachine, tmp_path: Path, launch: tuple[str, ...]
) -> None:
    """Both ranks meet the missing kernel; the launch shows it once, with the ways out.

    Rank 0's line under Lightning's own launcher (its second process ends without a word), the
    launcher's under accelctl launch, with the ways out as the line the user ran.
    """
    done = run(occl_machine, tmp_path / "out", "openreg", 2, *launch)
    line = assert_stopped_with_one_line(done)
    if launch:
        assert line.startswith("accelctl launch: aten::convolution has no kernel for openreg:")
        assert "ACCELCTL_CPU_FALLBACK=1 accelctl launch --accelerator openreg --devices 2" in line
    else:
        assert line.startswith(f"accelctl: {WHAT.format(rank=0)}: {ON_CPU}; ")
    assert "called by Conv2d at features.0" in line and ON_CPU in line

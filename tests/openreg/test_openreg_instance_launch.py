"""``accelctl launch`` of a script with its own instance gives it one device per process.

``examples/custom_accelerator.py``'s own line, ``accelctl launch --devices 2
examples/custom_accelerator.py``, on a machine where torch_openreg 0.0.3 is installed, so that the
launcher's ``"auto"`` is openreg. The launcher hands its children openreg's devices
(``ACCELCTL_ACCELERATOR=privateuse1``, ``ACCELCTL_DEVICES='0,1'``); the script passes its own
instance, a CPU-like accelerator the launcher could not see, which takes one device per process of
the launch, as in a plain torchrun child, instead of refusing openreg's indices.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from openregmachine import UserMachine, succeeded, temporary_folder

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "custom_accelerator.py"


def test_the_examples_launch_line_trains_its_instance_on_two_processes(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    chosen = json.loads(succeeded(occl_machine.accelctl("resolve", "--json")).stdout)
    assert chosen["devices"] == ["openreg:0", "openreg:1"]  # the launcher's "auto": openreg's
    done = occl_machine.run(
        sys.executable, "-m", "accelctl", "launch", "--devices", "2", str(EXAMPLE),
        cwd=tmp_path, EPOCHS="1", TMPDIR=temporary_folder(tmp_path),
    )  # fmt: skip
    succeeded(done)
    assert "trained on 'cpu-custom' (2 process(es), device cpu)" in done.stdout

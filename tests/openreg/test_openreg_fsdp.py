"""issue 28: ``Trainer(strategy="fsdp")`` on torch_openreg, through the generic ``privateuse1``
plugin.

0.0.2 lacks two things FSDP2 needs (``torch.openreg.Stream``/``Event``/``current_stream``, and
storage resize): the Trainer refuses it, naming both in the device's own words, when it is made,
before any process is started. A newer wheel that can run FSDP2 runs the training test here
instead, when ``accelctl.capabilities.fsdp_gaps`` says so (skipped with its reasons otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openregmachine import UserMachine, shared_run, succeeded
from rankresults import assert_equal, report, weights

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

SCRIPT = Path(__file__).parents[1] / "trainer" / "fsdp_run.py"

#: Made alone (``python -c``), as a user's script starts: the Trainer of 2 openreg devices would
#: print the `accelctl launch` command to run, or refuse FSDP2 first.
PROBE = """
import json

import torch.distributed as dist

import accelctl
from accelctl.capabilities import fsdp_gaps

gaps = [gap.to_dict() for gap in fsdp_gaps("openreg", "occl")]
try:
    accelctl.Trainer(accelerator="openreg", devices=2, strategy="fsdp")
    refusal = None
except accelctl.AccelctlError as error:
    refusal = {"type": type(error).__name__, "message": str(error)}
print(json.dumps({"gaps": gaps, "refusal": refusal, "group": dist.is_initialized()}))
"""


@pytest.fixture(scope="module")
def probe(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``PROBE`` printed, from one process per session (both tests read it)."""

    def run(out: Path) -> None:
        (out / "probe.json").write_text(json.dumps(occl_machine.python(PROBE)))

    folder = shared_run(tmp_path_factory, "openreg-fsdp-probe", run)
    result: dict[str, Any] = json.loads((folder / "probe.json").read_text())
    return result


def test_fsdp_is_refused_naming_what_the_device_lacks_before_any_process_starts(
    probe: dict[str, Any],
) -> None:
    if not probe["gaps"]:
        pytest.skip("this torch_openreg has what FSDP2 needs: the training test runs instead")
    refusal = probe["refusal"]
    assert refusal["type"] == "ProcessSetupError"
    message = refusal["message"]
    assert message.startswith("strategy='fsdp' cannot run on 'privateuse1' (device type 'openreg'")
    assert "device-streams (module 'torch_openreg.openreg' has no attribute 'Stream'" in message
    assert " and storage-resize (NotImplementedError: You should register" in message
    assert "resizePrivateUse1Bytes" in message
    assert "accelctl launch --" not in message  # nothing to launch: no rank ever started
    assert probe["group"] is False


def test_fsdp_trains_on_two_openreg_devices_as_by_hand_and_resumes_bit_identical(
    probe: dict[str, Any], occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if probe["gaps"]:
        pytest.skip(
            "FSDP2 cannot run on this torch_openreg: "
            + "; ".join(f"{gap['name']}: {gap['reason']}" for gap in probe["gaps"])
        )

    def launch(out: Path) -> None:
        command = ("launch", "--accelerator", "openreg", "--devices", "2")
        succeeded(occl_machine.accelctl(*command, str(SCRIPT), str(out), "hand,whole,cut,resumed"))

    runs = shared_run(tmp_path_factory, "openreg-fsdp", launch)
    for rank in (0, 1):
        assert report(runs, "whole", rank)["device"] == f"openreg:{rank}"
        assert_equal(weights(runs, "whole", rank), weights(runs, "hand", 0))
        assert_equal(weights(runs, "resumed", rank), weights(runs, "whole", 0))

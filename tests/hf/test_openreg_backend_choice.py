"""On openreg, the bridges refuse a backend the device lacks and map Accelerate's ``"nccl"``.

The backend of the process group through the Accelerate and transformers bridges under ``accelctl
launch --accelerator openreg --devices 2`` (torch_openreg 0.0.3, whose collective backend is
``occl``). A named backend openreg lacks (``gloo``) is refused when the ``Accelerator`` /
``TrainingArguments`` are made, naming ``occl``, instead of torch's ``No backend type associated
with device type openreg`` in every rank; Accelerate's default ``"nccl"`` joins the group over
``occl``, with a warning saying so. One run (``tests/openreg/backend_choice_run.py``); the
in-process cases: ``test_backend_refusals.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from openregmachine import UserMachine, shared_run, succeeded, temporary_folder
from rankresults import report

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("accelerate")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).parents[1] / "openreg" / "backend_choice_run.py"
LAUNCH = (sys.executable, "-m", "accelctl", "launch", "--accelerator", "openreg", "--devices", "2")


@pytest.fixture(scope="module")
def runs(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def run(out: Path) -> None:
        environ = {"HF_HOME": str(out / "hf"), "TMPDIR": temporary_folder(out)}
        succeeded(occl_machine.run(*LAUNCH, str(SCRIPT), str(out / "choice"), cwd=out, **environ))

    return shared_run(tmp_path_factory, "openreg-backend-choice", run)


@pytest.mark.parametrize("rank", [0, 1])
def test_gloo_named_on_openreg_is_refused_naming_occl(runs: Path, rank: int) -> None:
    seen = report(runs, "choice", rank)
    for key, named in (
        ("accelerate_gloo", "InitProcessGroupKwargs(backend='gloo')"),
        ("transformers_gloo", "ddp_backend='gloo'"),
    ):
        message = seen[key]
        assert message is not None, f"{named} was not refused"
        assert message.startswith(f"{named} names the torch.distributed backend 'gloo'"), message
        assert "'gloo' does not support 'openreg' tensors" in message
        assert "torch's backend for 'openreg' devices here is 'occl'" in message
        assert "the launcher started 2 processes for this run, and each refuses here" in message


@pytest.mark.parametrize("rank", [0, 1])
def test_accelerates_default_nccl_joins_over_occl_with_a_warning(runs: Path, rank: int) -> None:
    seen = report(runs, "choice", rank)
    (warning,) = seen["nccl_warnings"]
    assert "'nccl' does not support 'openreg' tensors" in warning
    assert "join their group over 'occl'" in warning
    assert (seen["device"], seen["state_backend"]) == (f"openreg:{rank}", "occl")
    assert seen["group_backend"] == "occl"
    assert seen["sum"] == 3.0  # 1 + 2: the group carried both ranks' tensors

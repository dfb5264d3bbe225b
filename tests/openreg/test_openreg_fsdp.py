"""``Trainer(strategy="fsdp")`` on torch_openreg, through the generic ``privateuse1`` plugin.

0.0.2 (``fsdp_gaps_machine``) lacks two things FSDP2 needs (``torch.openreg.Stream``/``Event``/
``current_stream``, and storage resize): the Trainer refuses it, naming both in the device's own
words, when it is made, before any process is started. 0.0.3 (the suite's) has them
(``accelctl.capabilities.fsdp_gaps`` finds none), and the Trainer shards a model over 2 openreg
processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
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


def probed(machine: UserMachine, factory: pytest.TempPathFactory, name: str) -> dict[str, Any]:
    """What ``PROBE`` printed on ``machine``, from one process per session."""

    def run(out: Path) -> None:
        (out / "probe.json").write_text(json.dumps(machine.python(PROBE)))

    folder = shared_run(factory, f"openreg-fsdp-probe-{name}", run)
    result: dict[str, Any] = json.loads((folder / "probe.json").read_text())
    return result


@pytest.fixture(scope="module")
def probe(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``PROBE`` on the suite's torch_openreg, 0.0.3."""
    return probed(occl_machine, tmp_path_factory, "fsdp")


@pytest.fixture(scope="module")
def gaps_probe(
    fsdp_gaps_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """``PROBE`` on torch_openreg 0.0.2, without FSDP2's streams and storage resize."""
    return probed(fsdp_gaps_machine, tmp_path_factory, "gaps")


def test_fsdp_is_refused_naming_what_the_device_lacks_before_any_process_starts(
    gaps_probe: dict[str, Any],
) -> None:
    probe = gaps_probe
    assert [gap["name"] for gap in probe["gaps"]] == ["device-streams", "storage-resize"]
    refusal = probe["refusal"]
    assert refusal["type"] == "ProcessSetupError"
    message = refusal["message"]
    # One name per device (issue 46): the backend's, not the plugin's privateuse1.
    assert message.startswith("strategy='fsdp' cannot run on 'openreg' (backend 'occl'): it lacks")
    assert message.endswith(
        "`accelctl validate --capabilities openreg` shows what the device can do"
    )
    assert "device-streams (module 'torch_openreg.openreg' has no attribute 'Stream'" in message
    assert " and storage-resize (NotImplementedError: You should register" in message
    assert "resizePrivateUse1Bytes" in message
    assert "accelctl launch --" not in message  # nothing to launch: no rank ever started
    assert probe["group"] is False


def test_a_device_with_what_fsdp2_needs_is_not_refused_but_told_how_to_launch(
    probe: dict[str, Any],
) -> None:
    assert probe["gaps"] == []
    refusal = probe["refusal"]  # 2 devices asked for in a process alone
    assert refusal["type"] == "ProcessSetupError"
    assert refusal["message"].startswith(
        "devices=2 (openreg:0, openreg:1) on 'openreg' needs one process per device"
    )
    assert "accelctl.launch(<your training function>, accelerator='openreg'" in refusal["message"]
    assert "cannot run" not in refusal["message"] and probe["group"] is False


@pytest.fixture(scope="module")
def runs(
    probe: dict[str, Any], occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Run ``fsdp_run.py`` on 2 openreg processes (``occl``), once per session.

    By hand, the Trainer whole, cut and resumed, and without dropout in float32 and bf16-mixed.
    """
    assert probe["gaps"] == []  # 0.0.3: the device has what FSDP2 needs

    def launch(out: Path) -> None:
        command = ("launch", "--accelerator", "openreg", "--devices", "2", str(SCRIPT), str(out))
        runs = "hand,whole,cut,resumed,plain,plain-bf16,plain-cut"
        succeeded(occl_machine.accelctl(*command, runs))

    return shared_run(tmp_path_factory, "openreg-fsdp", launch)


@pytest.fixture(scope="module")
def cpu_runs(
    runs: Path, occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Run the same Trainer runs on 2 CPU processes (``gloo``), openreg not loaded.

    And ``plain`` resumed there from the checkpoint ``plain-cut`` wrote on openreg.
    """
    written_on_openreg = runs / "plain-cut" / "checkpoints" / "run-0" / "last.ckpt"

    def launch(out: Path) -> None:
        command = ("launch", "--cpu", "--devices", "2", str(SCRIPT), str(out))
        runs = ("plain,plain-bf16,plain-resumed", str(written_on_openreg))
        succeeded(occl_machine.accelctl(*command, *runs, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))

    return shared_run(tmp_path_factory, "openreg-fsdp-cpu", launch)


def test_fsdp_trains_on_two_openreg_devices_as_by_hand_and_resumes_bit_identical(
    runs: Path,
) -> None:
    for rank in (0, 1):
        assert report(runs, "whole", rank)["device"] == f"openreg:{rank}"
        assert_equal(weights(runs, "whole", rank), weights(runs, "hand", 0))
        assert_equal(weights(runs, "resumed", rank), weights(runs, "whole", 0))


def largest_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    assert first.keys() == second.keys()
    return max(float((first[k].float() - second[k].float()).abs().max()) for k in first)


def test_fsdp_on_openreg_ends_with_the_weights_of_two_cpu_processes(
    runs: Path, cpu_runs: Path
) -> None:
    # Without dropout (each device type draws from its own generator). The same kernels (openreg
    # computes on the host) and the same reductions of 2 ranks' shards (a sum of two float32
    # numbers is the same in either order, and halving it is exact): the device and its
    # collectives add no rounding of their own, so the weights are equal.
    openreg, cpu = weights(runs, "plain", 0), weights(cpu_runs, "plain", 0)
    assert largest_difference(openreg, cpu) == 0.0


def test_bf16_mixed_on_openreg_computes_in_bfloat16_and_ends_as_on_the_cpu(
    runs: Path, cpu_runs: Path
) -> None:
    assert "torch.bfloat16" in report(runs, "plain-bf16", 0)["dtypes"]  # MixedPrecisionPolicy's
    # As in float32: the same host kernels, in bfloat16 on both (FSDP2's MixedPrecisionPolicy
    # casts the parameters; openreg's autocast and the CPU's cast the same ops), and reductions of
    # two shards that no order changes. Both runs are on this machine: equal on any CPU.
    openreg, cpu = weights(runs, "plain-bf16", 0), weights(cpu_runs, "plain-bf16", 0)
    assert largest_difference(openreg, cpu) == 0.0


def test_a_run_cut_on_openreg_resumes_on_two_cpu_processes_to_the_same_weights(
    runs: Path, cpu_runs: Path
) -> None:
    """A sharded checkpoint written mid-run on openreg resumes on CPUs to the unstopped weights.

    Written by 2 openreg processes at step 5 of 12, resumed on 2 CPU processes; the run ends with
    the weights of the run never stopped, on either device type.
    """
    assert report(runs, "plain-cut", 0)["stopped"] == "stopped at step 7"
    resumed = report(cpu_runs, "plain-resumed", 0)
    assert resumed["device"] == "cpu" and resumed["global_step"] == 12
    assert (
        largest_difference(weights(cpu_runs, "plain-resumed", 0), weights(runs, "plain", 0)) == 0.0
    )
    assert_equal(weights(cpu_runs, "plain-resumed", 1), weights(cpu_runs, "plain-resumed", 0))


def test_a_checkpoint_written_on_openreg_resumes_on_the_cpu_in_one_process(
    runs: Path, tmp_path: Path
) -> None:
    """A sharded checkpoint written by 2 openreg processes loads into one CPU process.

    Sharded (a 1-process mesh) or not.
    """
    import sys

    from torch.utils.data import DataLoader

    import accelctl

    sys.path.insert(0, str(SCRIPT.parent))
    from fsdp_run import EPOCHS, Net, dataset

    last = runs / "whole" / "checkpoints" / "run-0" / "last.ckpt"
    state = torch.load(last, weights_only=True)
    assert (state["strategy"], state["world_size"]) == ("fsdp", 2)
    for strategy in ("fsdp", "auto"):
        model = Net()
        trainer = accelctl.Trainer(
            accelerator="cpu", strategy=strategy, max_epochs=EPOCHS, root_dir=tmp_path / strategy
        )
        with pytest.warns(UserWarning, match=r"come from 2 process\(es\), this run has 1"):
            trainer.fit(model, DataLoader(dataset(), batch_size=10), ckpt_path=last)
        assert trainer.global_step == state["global_step"]  # finished: loaded, trains no more
        loaded = {
            key: (value.to_local() if hasattr(value, "to_local") else value).detach().cpu()
            for key, value in model.state_dict().items()
        }
        assert_equal(loaded, weights(runs, "whole", 0))

"""issue 28, item 2: the bridges' FSDP2 paths on torch_openreg through the generic
``privateuse1`` plugin (``occl``).

What the device can do decides what is tested, never a version number: one process asks
``accelctl.capabilities.fsdp_gaps("openreg", "occl")`` and makes Lightning's Trainer with
``ModelParallelStrategy`` and Accelerate's ``Accelerator`` with the FSDP2 plugin (as rank 0 of
2). On 0.0.2 FSDP2 misses the device module's streams and storage resize: both bridges refuse
with those reasons, when the Trainer or ``Accelerator`` is made, before FSDP's own stack trace.
On a wheel without gaps the refusal tests skip, and one 2-process run per bridge trains to the
weights of one CPU process (the drivers and checks of ``tests/integrations``); with gaps those
skip, naming them. And on CPU processes where openreg is loaded (torch's current accelerator),
Accelerate's FSDP2 run on the ``cpu`` plugin shards on a ``cpu`` mesh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rankresults import report, weights

from .conftest import UserMachine, shared_run, succeeded

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("lightning")
pytest.importorskip("accelerate")

INTEGRATIONS = Path(__file__).parents[1] / "integrations"
sys.path.insert(0, str(INTEGRATIONS))  # the drivers' shared module, not a package
from fsdp_shared import check_run  # noqa: E402

#: One process: the gaps, and what each bridge does with ModelParallelStrategy / the FSDP2
#: plugin on openreg when it is made (the Accelerator as rank 0 of 2: refused, if at all,
#: before a process group is made, so no second process is needed).
ATTEMPT = """
import json, os
import accelctl
from accelctl.capabilities import fsdp_gaps

def attempt(make):
    try:
        make()
    except Exception as error:
        return {"type": type(error).__name__, "message": str(error)}
    return None

def lightning():
    import lightning
    from lightning.pytorch.strategies import ModelParallelStrategy
    from accelctl.integrations.lightning import LightningAccelerator
    lightning.Trainer(
        accelerator=LightningAccelerator("openreg"), devices=2, logger=False,
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
    )

def accelerate():
    import accelerate
    from accelctl.integrations.accelerate import Accelerator
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    Accelerator("openreg", fsdp_plugin=accelerate.FullyShardedDataParallelPlugin(fsdp_version=2))

gaps = fsdp_gaps("openreg", "occl")
print(json.dumps({
    "gaps": [[gap.name, gap.reason] for gap in gaps],
    "lightning": attempt(lightning) if gaps else None,
    "accelerate": attempt(accelerate) if gaps else None,
}))
"""


@pytest.fixture(scope="module")
def attempted(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """What :data:`ATTEMPT` printed, from one process per test session (``shared_run``)."""

    def run(out: Path) -> None:
        (out / "attempt.json").write_text(json.dumps(occl_machine.python(ATTEMPT)))

    folder = shared_run(tmp_path_factory, "fsdp-bridges-attempt", run)
    return json.loads((folder / "attempt.json").read_text())


def _needs_gaps(attempted: dict[str, Any]) -> list[list[str]]:
    gaps: list[list[str]] = attempted["gaps"]
    if not gaps:
        pytest.skip("openreg has no FSDP2 gaps here: the bridges' runs below test it instead")
    return gaps


@pytest.mark.parametrize(
    ("bridge", "asked", "instead"),
    [
        ("lightning", "Trainer(strategy=ModelParallelStrategy(...))", "strategy='ddp'"),
        ("accelerate", "FullyShardedDataParallelPlugin(fsdp_version=2)", "without an fsdp_plugin"),
    ],
)
def test_the_bridge_refuses_with_the_capabilities_reasons_when_it_is_made(
    attempted: dict[str, Any], bridge: str, asked: str, instead: str
) -> None:
    gaps = _needs_gaps(attempted)
    refused = attempted[bridge]
    assert refused is not None, f"{bridge} was made on openreg despite {gaps}"
    assert refused["type"] == "ProcessSetupError"  # accelctl's, not FSDP's own error
    message = refused["message"]
    assert message.startswith(f"{asked} shards the model with torch's FSDP2")
    assert "on its 'openreg' devices over 'occl'" in message and instead in message
    # Each gap in the device's own words (0.0.2: "module 'torch_openreg.openreg' has no
    # attribute 'Stream'", "... implement `resizePrivateUse1Bytes` ...").
    for name, reason in gaps:
        assert f"{name} ({reason.rstrip('.')})" in message


def _runs_fsdp2(attempted: dict[str, Any]) -> None:
    if attempted["gaps"]:
        reasons = "; ".join(f"{name}: {reason}" for name, reason in attempted["gaps"])
        pytest.skip(f"openreg cannot run FSDP2 here ({reasons})")


def _run(
    machine: UserMachine, factory: pytest.TempPathFactory, bridge: str, accelerator: str
) -> Path:
    def run(out: Path) -> None:
        script = str(INTEGRATIONS / f"fsdp_{bridge}_run.py")
        if bridge == "lightning":  # Lightning's own launcher starts the second process
            argv = [sys.executable, script, str(out), accelerator]
        else:
            launch = ["-m", "accelctl", "launch", "--accelerator", accelerator, "--devices", "2"]
            argv = [sys.executable, *launch, script, str(out)]
        succeeded(machine.run(*argv, cwd=out, HF_HOME=str(out / "hf")))

    return shared_run(factory, f"fsdp-bridges-{bridge}-{accelerator}", run)


def test_accelerates_fsdp2_on_the_cpu_plugin_shards_on_a_cpu_mesh_where_openreg_is_loaded(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # With openreg loaded, torch's current accelerator is openreg: Accelerate alone leaves
    # fully_shard to build its mesh there, and moving the CPU model onto it fails ("variable
    # and tensor have incompatible tensor type"). The bridge has Accelerate build it on "cpu".
    out = _run(occl_machine, tmp_path_factory, "accelerate", "cpu")
    reports = [report(out.parent, out.name, rank) for rank in (0, 1)]
    ranks = [weights(out.parent, out.name, rank) for rank in (0, 1)]
    check_run(reports, ranks, device_type="cpu", backend="gloo")


@pytest.mark.parametrize("bridge", ["lightning", "accelerate"])
def test_where_openreg_can_run_fsdp2_each_bridge_trains_sharded_on_it(
    attempted: dict[str, Any],
    occl_machine: UserMachine,
    tmp_path_factory: pytest.TempPathFactory,
    bridge: str,
) -> None:
    _runs_fsdp2(attempted)
    out = _run(occl_machine, tmp_path_factory, bridge, "openreg")
    reports = [report(out.parent, out.name, rank) for rank in (0, 1)]
    ranks = [weights(out.parent, out.name, rank) for rank in (0, 1)]
    check_run(reports, ranks, device_type="openreg", backend="occl")

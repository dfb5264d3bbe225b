"""What the bridges' FSDP2 tests on torch_openreg share (``tests/lightning`` and ``tests/hf``).

The bridges' FSDP2 paths through the generic ``privateuse1`` plugin (``occl``).

On torch_openreg 0.0.2 (``fsdp_gaps_machine``) FSDP2 misses the device module's streams and
storage resize: one process asks ``accelctl.capabilities.fsdp_gaps("openreg", "occl")`` and makes
the bridge's sharded set-up (Lightning's Trainer with ``ModelParallelStrategy``, Accelerate's
``Accelerator`` with the FSDP2 plugin as rank 0 of 2), and each bridge refuses with those reasons,
when the Trainer or ``Accelerator`` is made, before FSDP's own stack trace. On the suite's 0.0.3
one 2-process run per bridge trains sharded on openreg to the weights of one CPU process (the
drivers and checks of ``tests/integrations``) and of the same bridge's run on 2 CPU processes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from openregmachine import UserMachine, shared_run, succeeded
from rankresults import report, weights

INTEGRATIONS = Path(__file__).parent / "integrations"
sys.path.insert(0, str(INTEGRATIONS))  # the drivers' shared module, not a package
from fsdp_shared import check_run  # noqa: E402

#: One process: the gaps, and what the bridge does with its sharded set-up on openreg when it is
#: made (the Accelerator as rank 0 of 2: refused, if at all, before a process group is made, so
#: no second process is needed).
ATTEMPT = """
import json, os
import accelctl
from accelctl.capabilities import fsdp_gaps

def attempt(make):
    try:
        make()
    except Exception as error:
        return {{"type": type(error).__name__, "message": str(error)}}
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
print(json.dumps({{
    "gaps": [[gap.name, gap.reason] for gap in gaps],
    "refused": attempt({bridge}) if gaps else None,
}}))
"""


def attempted(machine: UserMachine, factory: pytest.TempPathFactory, bridge: str) -> dict[str, Any]:
    """What :data:`ATTEMPT` printed for ``bridge``, from one process per test session."""

    def run(out: Path) -> None:
        (out / "attempt.json").write_text(json.dumps(machine.python(ATTEMPT.format(bridge=bridge))))

    folder = shared_run(factory, f"fsdp-bridges-attempt-{bridge}", run)
    result: dict[str, Any] = json.loads((folder / "attempt.json").read_text())
    return result


def check_refusal(attempted: dict[str, Any], asked: str, instead: str) -> None:
    """The bridge refused, with accelctl's error naming each of the device's FSDP2 gaps."""
    gaps = attempted["gaps"]
    assert [name for name, _ in gaps] == ["device-streams", "storage-resize"]
    refused = attempted["refused"]
    assert refused is not None, f"{asked} was made on openreg despite {gaps}"
    assert refused["type"] == "ProcessSetupError"  # accelctl's, not FSDP's own error
    message = refused["message"]
    assert message.startswith(f"{asked} shards the model with torch's FSDP2")
    assert "on its 'openreg' devices over 'occl'" in message and instead in message
    # Each gap in the device's own words (0.0.2: "module 'torch_openreg.openreg' has no
    # attribute 'Stream'", "... implement `resizePrivateUse1Bytes` ...").
    for name, reason in gaps:
        assert f"{name} ({reason.rstrip('.')})" in message


def bridge_run(
    machine: UserMachine, factory: pytest.TempPathFactory, bridge: str, accelerator: str
) -> Path:
    """Return the folder of one 2-process FSDP2 run of ``bridge`` on ``accelerator``.

    Made once per test session.
    """

    def run(out: Path) -> None:
        script = str(INTEGRATIONS / f"fsdp_{bridge}_run.py")
        if bridge == "lightning":  # Lightning's own launcher starts the second process
            argv = [sys.executable, script, str(out), accelerator]
        else:
            launch = ["-m", "accelctl", "launch", "--accelerator", accelerator, "--devices", "2"]
            argv = [sys.executable, *launch, script, str(out)]
        succeeded(machine.run(*argv, cwd=out, HF_HOME=str(out / "hf")))

    return shared_run(factory, f"fsdp-bridges-{bridge}-{accelerator}", run)


def run_and_check(
    machine: UserMachine, factory: pytest.TempPathFactory, bridge: str, accelerator: str
) -> None:
    """Check one 2-process FSDP2 run of ``bridge`` on ``accelerator`` against one process's run.

    The check is ``fsdp_shared.check_run``.
    """
    out = bridge_run(machine, factory, bridge, accelerator)
    reports = [report(out.parent, out.name, rank) for rank in (0, 1)]
    ranks = [weights(out.parent, out.name, rank) for rank in (0, 1)]
    device_type, backend = ("cpu", "gloo") if accelerator == "cpu" else ("openreg", "occl")
    check_run(reports, ranks, device_type=device_type, backend=backend)


def openreg_equals_cpu(machine: UserMachine, factory: pytest.TempPathFactory, bridge: str) -> None:
    """The bridge's 2-process FSDP2 run on openreg ends with its CPU run's weights, bit for bit.

    On ``occl`` against 2 CPU processes on ``gloo``: the same samples in the same steps (asserted),
    and openreg computes with the CPU's kernels; each step's gradients are a sum of two float32
    values, which both backends add in the same order.
    """
    runs = {name: bridge_run(machine, factory, bridge, name) for name in ("openreg", "cpu")}
    seen = {
        name: [report(out.parent, out.name, r)["seen"] for r in (0, 1)]
        for name, out in runs.items()
    }
    assert seen["openreg"] == seen["cpu"]
    device, cpu = (weights(out.parent, out.name, 0) for out in runs.values())
    assert device.keys() == cpu.keys()
    for name in cpu:
        assert torch.equal(device[name], cpu[name]), (name, (device[name] - cpu[name]).abs().max())

"""Accelerate's sharded path through the bridge: its FSDP2 plugin on accelctl accelerators.

In this process: the refusals the bridge makes when the ``Accelerator`` is made. Marked ``slow``:
one 2-process run on the ``cpu`` plugin (gloo) under ``accelctl launch``, one test making every
assertion on it (``fsdp_shared.check_run``): it trains, the parameters really are sharded, and
both ranks end with the same gathered weights, equal to one process's run on the samples each
step saw.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import accelerate
import pytest

import accelctl
from accelctl.integrations.accelerate import Accelerator

HERE = Path(__file__).parents[1] / "integrations"  # the helper modules and run scripts
sys.path.insert(0, str(HERE))  # helper modules, not a package
import rankresults  # noqa: E402
from fakeaccelerators import TWO_PROCESSES, MetaAccelerator  # noqa: E402
from fsdp_shared import check_run, run_clean  # noqa: E402

# -- in this process --------------------------------------------------------------


@pytest.fixture
def two_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Set torchrun's variables for rank 0 of 2; reset Accelerate's state after.

    Nothing rendezvous: every case here is refused before a process group is made.
    """
    for key, value in TWO_PROCESSES.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ACCELCTL_DEVICES", raising=False)
    yield
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def _fsdp_plugin(version: int) -> Any:
    return accelerate.FullyShardedDataParallelPlugin(fsdp_version=version)


@pytest.mark.usefixtures("two_processes")
def test_accelerate_fsdp2_where_it_cannot_run_is_refused_with_the_capabilities() -> None:
    # meta devices: torch has no torch.meta module with FSDP2's streams and events.
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        Accelerator(MetaAccelerator(backend="nosuchccl"), fsdp_plugin=_fsdp_plugin(2))
    message = str(refused.value)
    assert message.startswith("FullyShardedDataParallelPlugin(fsdp_version=2) shards the model")
    assert "'metaacc' cannot run on its 'meta' devices over 'nosuchccl'" in message
    assert "device-streams (" in message and "all-gather-into-tensor (" in message
    assert "an Accelerator without an fsdp_plugin" in message


@pytest.mark.usefixtures("two_processes")
def test_accelerate_fsdp1_off_cuda_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Accelerate alone on the CPU: the plugin is ignored and the model trains in DDP, silently.
    with pytest.raises(
        accelctl.ProcessSetupError, match=r"fsdp_version=1\) wraps the model in FSDP1"
    ):
        Accelerator("cpu", fsdp_plugin=_fsdp_plugin(1))
    # accelerate launch --use_fsdp says it with variables, read as Accelerate reads them.
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(accelctl.ProcessSetupError, match="--fsdp_version 2"):
        Accelerator("cpu")


# -- 2 CPU processes


@pytest.mark.slow
def test_fsdp2_on_two_cpu_processes_trains_sharded_to_one_processs_weights(tmp_path: Path) -> None:
    # One 2-process run under accelctl launch, every assertion on it in this test.
    launch = [sys.executable, "-m", "accelctl", "launch", "--accelerator", "cpu", "--devices", "2"]
    run_clean(
        [*launch, str(HERE / "fsdp_accelerate_run.py"), str(tmp_path / "accelerate")], tmp_path
    )
    reports = [rankresults.report(tmp_path, "accelerate", rank) for rank in (0, 1)]
    weights = [rankresults.weights(tmp_path, "accelerate", rank) for rank in (0, 1)]
    check_run(reports, weights, device_type="cpu", backend="gloo")
    assert all(r["distributed_type"] == "DistributedType.FSDP" for r in reports)

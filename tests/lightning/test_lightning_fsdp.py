"""Lightning's sharded path through the bridge: ``ModelParallelStrategy`` on accelctl accelerators.

In this process: the choices the bridge makes when the Trainer or Fabric is made (the plugin's
backend, the refusals). Marked ``slow``: one 2-process run on the ``cpu`` plugin (gloo), one test
making every assertion on it (``fsdp_shared.check_run``): it trains, the parameters really are
sharded, and both ranks end with the same gathered weights, equal to one process's run on the
samples each step saw.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning
import pytest
import torch
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

import accelctl
from accelctl.integrations.lightning import LightningAccelerator

HERE = Path(__file__).parents[1] / "integrations"  # the helper modules and run scripts
sys.path.insert(0, str(HERE))  # helper modules, not a package
import rankresults  # noqa: E402
from fsdp_shared import check_run, run_clean  # noqa: E402
from tinymodel import quiet_trainer_options  # noqa: E402

#: A backend torch has registered for CPU devices that is not torch's default for them, so
#: that a test can see whose choice the strategy's backend is (registered once per process).
SHARDING_BACKEND = "fsdpbridgeccl"


class CpuAccelerator(accelctl.Accelerator):
    """Two CPU "devices" whose plugin declares ``backend``."""

    name = "shardcpu"
    device_type = "cpu"

    def __init__(self, backend: str) -> None:
        self.distributed_backend = backend

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2


@pytest.fixture(scope="module")
def registered_backend() -> str:
    """Register :data:`SHARDING_BACKEND` with torch.distributed for CPU devices.

    Never started: no test here makes a process group.
    """
    if not hasattr(torch.distributed.Backend, SHARDING_BACKEND.upper()):
        torch.distributed.Backend.register_backend(
            SHARDING_BACKEND, lambda *args: None, devices=["cpu"]
        )
    return SHARDING_BACKEND


def _sharded(make: Any, accelerator: Any, **strategy: Any) -> Any:
    if make is lightning.Trainer:
        return make(
            accelerator=accelerator,
            devices=2,
            strategy=ModelParallelStrategy(**strategy),
            **quiet_trainer_options(),
        )
    from lightning.fabric.strategies import ModelParallelStrategy as FabricModelParallel

    return make(
        accelerator=accelerator,
        devices=2,
        strategy=FabricModelParallel(lambda module, mesh: module, **strategy),
    )


# -- in this process -------------------------------------------------------------


@pytest.mark.parametrize("make", [lightning.Trainer, lightning.Fabric])
def test_model_parallel_takes_the_plugins_backend(make: Any, registered_backend: str) -> None:
    # Lightning alone: torch's default for the device type ("gloo" for cpu).
    made = _sharded(make, LightningAccelerator(CpuAccelerator(registered_backend)))
    assert made.strategy.process_group_backend == registered_backend


def test_a_backend_named_in_the_strategy_is_kept_and_warned(registered_backend: str) -> None:
    with pytest.warns(UserWarning, match=rf"over '{registered_backend}', but the strategy names"):
        trainer = _sharded(
            lightning.Trainer,
            LightningAccelerator(CpuAccelerator(registered_backend)),
            process_group_backend="gloo",
        )
    assert trainer.strategy.process_group_backend == "gloo"


@pytest.mark.parametrize("make", [lightning.Trainer, lightning.Fabric])
def test_model_parallel_where_fsdp2_cannot_run_is_refused_with_the_capabilities(make: Any) -> None:
    # A backend torch does not know: its collectives are FSDP2 needs this process can check.
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        _sharded(make, LightningAccelerator(CpuAccelerator("nosuchccl")))
    message = str(refused.value)
    assert "ModelParallelStrategy(...)) shards the model with torch's FSDP2" in message
    assert "'shardcpu' cannot run on its 'cpu' devices over 'nosuchccl'" in message
    for need in ("all-gather-into-tensor", "reduce-scatter-tensor"):
        assert f"{need} (" in message
    assert "accelctl validate --capabilities" in message and "strategy='ddp'" in message


def test_the_fsdp2_check_is_made_once_per_machine_in_local_rank_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fsdp_gaps runs on device 0: another rank would start a runtime on its neighbour's device.
    monkeypatch.setenv("LOCAL_RANK", "1")  # as in the process Lightning's launcher starts
    trainer = _sharded(lightning.Trainer, LightningAccelerator(CpuAccelerator("nosuchccl")))
    assert trainer.strategy.process_group_backend == "nosuchccl"


@pytest.mark.parametrize("make", [lightning.Trainer, lightning.Fabric])
@pytest.mark.parametrize("strategy", ["fsdp", "instance"])
def test_fsdp1_is_refused_with_the_sharded_path_that_runs(make: Any, strategy: str) -> None:
    # Lightning alone: "requires a GPU accelerator ... pass a CUDAAccelerator() instance".
    from lightning.fabric.strategies import FSDPStrategy as FabricFSDPStrategy

    flag: Any = strategy
    if strategy == "instance":
        flag = FSDPStrategy() if make is lightning.Trainer else FabricFSDPStrategy()
    with pytest.raises(ValueError, match="wraps the model in FSDP1") as refused:
        make(accelerator=LightningAccelerator("cpu"), devices=2, strategy=flag)
    message = str(refused.value)
    assert "accelctl accelerator 'cpu'" in message and "ModelParallelStrategy(" in message
    assert "fully_shard" in message and "Sharded training" in message


def test_lightnings_own_accelerators_keep_lightnings_fsdp_refusal() -> None:
    with pytest.raises(ValueError, match="requires a GPU accelerator"):
        lightning.Trainer(accelerator="cpu", devices=2, strategy="fsdp")


# -- 2 CPU processes


@pytest.mark.slow
def test_fsdp2_on_two_cpu_processes_trains_sharded_to_one_processs_weights(tmp_path: Path) -> None:
    # One 2-process run (Lightning's own launcher starts the second process), every assertion
    # on it in this test.
    out = tmp_path / "lightning"
    run_clean([sys.executable, str(HERE / "fsdp_lightning_run.py"), str(out), "cpu"], tmp_path)
    reports = [rankresults.report(tmp_path, "lightning", rank) for rank in (0, 1)]
    weights = [rankresults.weights(tmp_path, "lightning", rank) for rank in (0, 1)]
    check_run(reports, weights, device_type="cpu", backend="gloo")
    # A mean logged with sync_dist=True is the mean over both ranks.
    last = sum(r["losses"][-1] for r in reports) / 2
    assert all(r["logged_loss"] == pytest.approx(last, rel=1e-6) for r in reports)

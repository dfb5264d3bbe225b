"""The bridges' sharded path: Lightning's ``ModelParallelStrategy`` and Accelerate's FSDP2 plugin
on accelctl accelerators.

In this process: the choices the bridges make when the Trainer or ``Accelerator`` is made (the
plugin's backend, the refusals). Marked ``slow``: one 2-process run per bridge on the ``cpu``
plugin (gloo), one test each making every assertion on it (``fsdp_shared.check_run``): it
trains, the parameters really are sharded, and both ranks end with the same gathered weights,
equal to one process's run on the samples each step saw.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

lightning = pytest.importorskip("lightning")
accelerate = pytest.importorskip("accelerate")

import torch  # noqa: E402
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy  # noqa: E402

import accelctl  # noqa: E402
from accelctl.integrations import _accelerate_state, _lightning_connector  # noqa: E402
from accelctl.integrations.accelerate import Accelerator  # noqa: E402
from accelctl.integrations.lightning import LightningAccelerator  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # helper modules, not a package
import rankresults  # noqa: E402
from fakeaccelerators import TWO_PROCESSES, MetaAccelerator  # noqa: E402
from fsdp_shared import check_run  # noqa: E402
from tinymodel import quiet_trainer_options  # noqa: E402

#: A backend torch has registered for CPU devices that is not torch's default for them, so
#: that a test can see whose choice the strategy's backend is (registered once per process).
SHARDING_BACKEND = "fsdpbridgeccl"

#: A hang guard only (each process imports torch and Lightning or Accelerate on a loaded
#: machine); nothing is timed.
RUN_TIMEOUT_S = 300


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
    """:data:`SHARDING_BACKEND`, registered with torch.distributed for CPU devices (never
    started: no test here makes a process group)."""
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


# -- Lightning, in this process -------------------------------------------------------------


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


def test_model_parallel_on_an_unadapted_lightning_is_refused_before_sharding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trainer = _sharded(lightning.Trainer, LightningAccelerator("cpu"))
    monkeypatch.setattr(_lightning_connector, "_installed", False)  # as on an untested version
    with pytest.raises(lightning.fabric.utilities.exceptions.MisconfigurationException) as refused:
        trainer.accelerator.setup(trainer)
    assert f"adapted for lightning{_lightning_connector.tested_range()} only" in str(refused.value)


# -- Accelerate, in this process --------------------------------------------------------------


@pytest.fixture
def two_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torchrun's variables for rank 0 of 2 (nothing rendezvous: every case here is refused
    before a process group is made); Accelerate's state reset after."""
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


@pytest.mark.usefixtures("two_processes")
def test_accelerate_fsdp2_on_an_unadapted_accelerate_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_accelerate_state, "_installed", False)  # as on an untested version
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        Accelerator("cpu", fsdp_plugin=_fsdp_plugin(2))
    assert f"adapted for accelerate{_accelerate_state.tested_range()} only" in str(refused.value)


# -- 2 CPU processes, one run per bridge --------------------------------------------------------


def _environ() -> dict[str, str]:
    """This environment without a launcher's, a scheduler's or accelctl's choices, and with no
    scheduler on ``PATH`` (Lightning looks for SLURM's ``srun``)."""
    dropped = ("ACCELCTL_", "ACCELERATE_", "SLURM_", "TORCHELASTIC_", "FSDP_")
    launcher = {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped) and k not in launcher}
    env["PATH"] = str(Path(sys.executable).parent)
    return env


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(
        argv, capture_output=True, text=True, env=_environ(), timeout=RUN_TIMEOUT_S, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[-4000:]


def _command(bridge: str, out: Path) -> list[str]:
    """Lightning's run is started once (its own launcher starts the second process);
    Accelerate's under ``accelctl launch``."""
    python = sys.executable
    if bridge == "lightning":
        return [python, str(HERE / "fsdp_lightning_run.py"), str(out), "cpu"]
    launch = [python, "-m", "accelctl", "launch", "--accelerator", "cpu", "--devices", "2"]
    return [*launch, str(HERE / "fsdp_accelerate_run.py"), str(out)]


@pytest.mark.slow
@pytest.mark.parametrize("bridge", ["lightning", "accelerate"])
def test_fsdp2_on_two_cpu_processes_trains_sharded_to_one_processs_weights(
    tmp_path: Path, bridge: str
) -> None:
    # One 2-process run per bridge, every assertion on it in this test.
    _run(_command(bridge, tmp_path / bridge), tmp_path)
    reports = [rankresults.report(tmp_path, bridge, rank) for rank in (0, 1)]
    weights = [rankresults.weights(tmp_path, bridge, rank) for rank in (0, 1)]
    check_run(reports, weights, device_type="cpu", backend="gloo")
    if bridge == "accelerate":
        assert all(r["distributed_type"] == "DistributedType.FSDP" for r in reports)
    else:
        # A mean logged with sync_dist=True is the mean over both ranks.
        last = sum(r["losses"][-1] for r in reports) / 2
        assert all(r["logged_loss"] == pytest.approx(last, rel=1e-6) for r in reports)

"""Lightning through the bridge on 2 openreg devices, under each launcher, against 2 CPU processes.

torch_openreg 0.0.3, its ``occl`` backend, the generic ``privateuse1`` plugin: ``strategy="ddp"``
under ``accelctl launch``, ``ddp_spawn``, and Lightning's default strategy for ``devices=2``
(Lightning starts the second process itself); ``bf16-mixed`` and Fabric; against Lightning's own
2-CPU-process run.

Without the bridge's DDP adaptation every rank dies in ``DDPStrategy._setup_model``
(``torch.cuda.Stream requires CUDA support``), and a metric logged with ``sync_dist=True`` dies
in ``occl`` (``ReduceOp.AVG`` on its integer batch size). Three runs (``lightning_run.py``), each
a fixture that the tests below read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from openregmachine import UserMachine, shared_run, succeeded
from rankresults import assert_equal, report, weights

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("lightning")

SCRIPT = Path(__file__).parents[1] / "openreg" / "lightning_run.py"


def _run(machine: UserMachine, factory: pytest.TempPathFactory, mode: str) -> Path:
    if mode == "launched":
        command = ["-m", "accelctl", "launch", "--accelerator", "openreg", "--devices", "2"]
    else:
        command = []  # python lightning_run.py: Lightning starts the processes

    def run(out: Path) -> None:
        succeeded(machine.run(sys.executable, *command, str(SCRIPT), str(out), mode, cwd=out))

    return shared_run(factory, f"lightning-{mode}", run)


@pytest.fixture(scope="module")
def launched(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fits ``ddp``, ``bf16``, ``fabric`` and ``cpu`` under ``accelctl launch``."""
    return _run(occl_machine, tmp_path_factory, "launched")


@pytest.fixture(scope="module")
def spawned(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(occl_machine, tmp_path_factory, "ddp_spawn")


@pytest.fixture(scope="module")
def by_lightning(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(occl_machine, tmp_path_factory, "default")


def assert_ran_on_openreg(run: Path, fit: str, dtype: str = "torch.float32") -> None:
    for rank in (0, 1):
        seen = report(run, fit, rank)
        assert (seen["world_size"], seen["strategy"]) == (2, "DDPStrategy")
        assert (seen["root_device"], seen["backend"]) == (f"openreg:{rank}", "occl")
        assert seen["ran"] == [[f"openreg:{rank}", dtype]]


def assert_same_training_as_lightnings_cpu_run(run: Path, fit: str, launched: Path) -> None:
    reference = weights(launched, "cpu", 0)
    for rank in (0, 1):
        assert_equal(weights(run, fit, rank), reference)
        # A mean over both processes, reduced by the bridge as Lightning reduces it for gloo.
        assert report(run, fit, rank)["train_loss"] == report(launched, "cpu", 0)["train_loss"]
    halves = [set(report(run, fit, rank)["seen_epoch0"]) for rank in (0, 1)]
    assert len(halves[0]) == len(halves[1]) == 32 and halves[0] | halves[1] == set(range(64))


def test_the_reference_is_lightnings_own_cpu_run(launched: Path) -> None:
    for rank in (0, 1):
        seen = report(launched, "cpu", rank)
        assert (seen["root_device"], seen["backend"], seen["world_size"]) == ("cpu", "gloo", 2)
    assert_equal(weights(launched, "cpu", 0), weights(launched, "cpu", 1))


def test_ddp_under_accelctl_launch_trains_each_rank_on_its_openreg_device(launched: Path) -> None:
    assert_ran_on_openreg(launched, "ddp")
    assert_same_training_as_lightnings_cpu_run(launched, "ddp", launched)


def test_ddp_spawn_trains_each_worker_on_its_openreg_device(spawned: Path, launched: Path) -> None:
    assert_ran_on_openreg(spawned, "ddp_spawn")
    assert_same_training_as_lightnings_cpu_run(spawned, "ddp_spawn", launched)


def test_lightnings_default_strategy_for_two_devices_runs_ddp_on_openreg(
    by_lightning: Path, launched: Path
) -> None:
    assert_ran_on_openreg(by_lightning, "default")
    assert_same_training_as_lightnings_cpu_run(by_lightning, "default", launched)


def test_bf16_mixed_autocasts_on_openreg_on_both_ranks(launched: Path) -> None:
    assert_ran_on_openreg(launched, "bf16", dtype="torch.bfloat16")
    assert_equal(weights(launched, "bf16", 0), weights(launched, "bf16", 1))


def test_fabric_wraps_ddp_and_reduces_a_mean_on_openreg(launched: Path) -> None:
    first, second = (weights(launched, "fabric", rank) for rank in (0, 1))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    for rank in (0, 1):
        # The mean of the integers 0 and 3, kept an integer as Lightning does for gloo.
        assert report(launched, "fabric", rank) == {
            "device": f"openreg:{rank}",
            "mean": 1,
            "dtype": "torch.int64",
            "trained": True,  # the optimizer made before setup() steps the model on openreg
        }

"""accelctl's Trainer and ``accelctl launch`` on 2 openreg devices with their own backend.

A non-CPU accelerator with its own collective backend (torch_openreg 0.0.3, ``occl``), through the
generic ``privateuse1`` plugin.

One launch on 2 openreg devices: a ``restart`` fit whose rank 1 is killed once (torchrun
starts the group again), then ``fp32`` and ``bf16`` fits and the ``cpu`` fit (the same model on
2 CPU processes over gloo, the reference) in the same processes; the tests read what every
process wrote (``trainer_run.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from openregmachine import UserMachine, shared_run, succeeded
from rankresults import assert_equal, report, weights

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("trainer_run.py")


@pytest.fixture(scope="module")
def runs(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def launch(out: Path) -> None:
        command = ("launch", "--accelerator", "openreg", "--devices", "2", "--max-restarts", "1")
        done = occl_machine.accelctl(*command, str(SCRIPT), str(out), "restart,fp32,bf16,cpu")
        (out / "launch.stderr").write_text(succeeded(done).stderr)

    return shared_run(tmp_path_factory, "openreg-trainer", launch)


def test_each_process_trains_on_its_own_openreg_device_over_occl(runs: Path) -> None:
    for rank in (0, 1):
        seen = report(runs, "fp32", rank)
        assert (seen["accelerator"], seen["world_size"]) == ("openreg", 2)  # its one name
        assert seen["device"] == f"openreg:{rank}"
        assert seen["ran"] == [[f"openreg:{rank}", "torch.float32"]]
        assert seen["backend"] == "occl"
    cpu = report(runs, "cpu", 1)
    assert (cpu["accelerator"], cpu["device"], cpu["backend"]) == ("cpu", "cpu", "gloo")


def test_the_distributed_sampler_gives_each_process_its_own_half(runs: Path) -> None:
    halves = [set(report(runs, "fp32", rank)["seen_epoch0"]) for rank in (0, 1)]
    assert len(halves[0]) == len(halves[1]) == 32
    assert halves[0] | halves[1] == set(range(64))


def test_weights_equal_on_both_devices_and_the_two_cpu_process_run(runs: Path) -> None:
    assert_equal(weights(runs, "fp32", 0), weights(runs, "fp32", 1))
    assert_equal(weights(runs, "cpu", 0), weights(runs, "cpu", 1))
    assert_equal(weights(runs, "fp32", 0), weights(runs, "cpu", 0))
    metrics = [report(runs, run, 0)["metrics"] for run in ("fp32", "cpu")]
    assert metrics[0]["train_loss"] == metrics[1]["train_loss"]


def test_a_checkpoint_is_written_every_epoch(runs: Path) -> None:
    # Saved from openreg tensors; this process has no openreg device (autoload off).
    path = runs / "fp32/checkpoints/run-0/last.ckpt"
    last = torch.load(path, map_location="cpu", weights_only=True)
    assert (last["epoch"], last["global_step"]) == (2, 8)
    assert_equal(last["model"], weights(runs, "fp32", 0))


def test_a_killed_rank_is_restarted_and_resumes_to_the_uninterrupted_weights(runs: Path) -> None:
    lines = [json.loads(line) for line in (runs / "restart/metrics.jsonl").open()]
    assert {line["restart"] for line in lines} == {0, 1}  # rank 1 was killed once
    for rank in (0, 1):
        assert_equal(weights(runs, "restart", rank), weights(runs, "fp32", 0))


def test_bf16_mixed_casts_on_openreg(runs: Path) -> None:
    for rank in (0, 1):
        assert report(runs, "bf16", rank)["ran"] == [[f"openreg:{rank}", "torch.bfloat16"]]
    assert_equal(weights(runs, "bf16", 0), weights(runs, "bf16", 1))


def test_no_rank_is_told_to_specify_device_id(runs: Path) -> None:
    # Issue 26: the Trainer binds the group to each rank's device (init_process_group's
    # device_id), so torch's barrier() has no device to guess and prints no warning about it.
    stderr = (runs / "launch.stderr").read_text()
    assert "device_id" not in stderr and "using the device under current context" not in stderr

"""issue 29: Ray Train's ``TorchTrainer`` on a plugin's devices, on a real local Ray cluster
(a head and a second node, ``conftest.py``), read from what one driver's three runs left
(``ray_run.py``): 2 workers on 2 openreg devices over occl, one of them killed once mid-run and
restarted by Ray; the same on 2 CPU workers, never stopped; a worker on a node without the
plugin."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rankresults import assert_equal, report, weights

pytestmark = [pytest.mark.openreg, pytest.mark.ray, pytest.mark.slow]


def test_the_node_advertises_its_openreg_devices_from_accelctl_ray_resources(
    ray_runs: Path,
) -> None:
    record = json.loads((ray_runs / "cluster.json").read_text())
    assert json.loads(record["ray_resources"]) == {"openreg": 2}


def test_the_runs_that_can_run_end_well(ray_runs: Path) -> None:
    for run in ("openreg", "cpu"):
        assert json.loads((ray_runs / run / "driver.json").read_text()) == {"error": None}, run


def test_each_worker_trains_on_its_own_openreg_device_over_occl(ray_runs: Path) -> None:
    for rank in (0, 1):
        seen = report(ray_runs / "openreg", "trainer", rank)
        assert (seen["accelerator"], seen["world_size"]) == ("privateuse1", 2)
        assert seen["device"] == f"openreg:{rank}"
        assert seen["ran"] == [[f"openreg:{rank}", f"openreg:{rank}"]]
        assert seen["backend"] == "occl"
    cpu = report(ray_runs / "cpu", "trainer", 1)
    assert (cpu["accelerator"], cpu["device"], cpu["backend"]) == ("cpu", "cpu", "gloo")


def test_a_hand_written_loop_runs_on_the_plugins_device(ray_runs: Path) -> None:
    for rank in (0, 1):
        seen = report(ray_runs / "openreg", "loop", rank)
        assert seen["device"] == f"openreg:{rank}"
        assert seen["ran"] == [[f"openreg:{rank}", f"openreg:{rank}"]]
        assert seen["wrapped"] == "DistributedDataParallel"
    assert report(ray_runs / "cpu", "loop", 0)["ran"] == [["cpu", "cpu"]]


def test_weights_equal_on_both_openreg_workers_and_the_two_cpu_worker_run(ray_runs: Path) -> None:
    for part in ("trainer", "loop"):
        openreg, cpu = ray_runs / "openreg", ray_runs / "cpu"
        assert_equal(weights(openreg, part, 0), weights(openreg, part, 1))
        assert_equal(weights(cpu, part, 0), weights(cpu, part, 1))
        assert_equal(weights(openreg, part, 0), weights(cpu, part, 0))


def test_a_killed_worker_is_restarted_and_resumes_from_the_trainers_checkpoint(
    ray_runs: Path,
) -> None:
    openreg = ray_runs / "openreg"
    assert (openreg / "killed").exists()  # worker 1 killed itself at step 7 of the first attempt
    lines = [json.loads(line) for line in (openreg / "trainer/metrics.jsonl").open()]
    assert {line["restart"] for line in lines} == {0, 1}  # Ray started the group again
    assert report(openreg, "trainer", 1)["restart"] == "1"
    # It resumed from the step-6 checkpoint, not from the start: the resumed epoch's figures
    # count the steps since the resume (docs/training.md), and its first logged step is 8.
    resumed = [line for line in lines if line["restart"] == 1 and line["kind"] == "step"]
    assert resumed and min(line["step"] for line in resumed) > 6
    # And it ends with the weights of the CPU run, never stopped (the weights test).


def test_a_worker_on_a_node_without_the_plugin_is_refused_with_accelctls_error(
    ray_runs: Path,
) -> None:
    error = json.loads((ray_runs / "misconfigured" / "driver.json").read_text())["error"]
    assert error is not None
    assert re.search(
        r"Ray Train worker 0 \(node [^,]+, local rank 0\): no accelerator named", error
    )
    assert "ACCELCTL_DISABLE" in error  # accelctl's own reason, from that node
    assert not (ray_runs / "misconfigured" / "trainer").exists()  # refused before training

"""Ray Train's ``TorchTrainer`` on a plugin's devices, on a real local Ray cluster.

A head and a second node (``conftest.py``), read from what one driver's runs left (``ray_run.py``):
2 workers on 2 openreg devices over occl, one of them killed once mid-run and restarted by Ray; the
same on 2 CPU workers, never stopped; a run whose first ``fit()`` fails and whose second resumes
from Ray's checkpoint; the Trainer on a Ray Data shard; a worker on a node without the plugin; and,
from a second driver (``ray_kernels_run.py``), a Conv2d openreg lacks a kernel for, with the
driver's CPU fallback and without it.
"""

from __future__ import annotations

import json
import math
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
    for run in ("openreg", "cpu", "resubmit", "raydata"):
        assert json.loads((ray_runs / run / "driver.json").read_text())["error"] is None, run


def test_each_worker_trains_on_its_own_openreg_device_over_occl(ray_runs: Path) -> None:
    for rank in (0, 1):
        seen = report(ray_runs / "openreg", "trainer", rank)
        assert (seen["accelerator"], seen["world_size"]) == ("openreg", 2)  # its one name
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
    # One run across Ray's restart: the restarted group continued its folder.
    assert {line["run"] for line in lines} == {"run-0"}
    assert [p.name for p in (openreg / "trainer/checkpoints").iterdir()] == ["run-0"]
    # And it ends with the weights of the CPU run, never stopped (the weights test).


def ray_result(ray_runs: Path, run: str, record: str = "driver.json") -> dict:
    result: dict = json.loads((ray_runs / run / record).read_text())
    return result


def test_the_result_holds_the_trainers_last_metrics_and_device_readings(ray_runs: Path) -> None:
    for run, part in (("cpu", "trainer"), ("openreg", "trainer"), ("resubmit", "trainer-b")):
        metrics = ray_result(ray_runs, run)["metrics"]
        rank0 = report(ray_runs / run, part, 0)
        assert rank0["metrics"] and rank0["metrics"].keys() <= metrics.keys(), run
        for name, value in rank0["metrics"].items():
            assert metrics[name] == value, (run, name)  # rank 0's figures, as Ray keeps them
        assert (metrics["epoch"], metrics["step"]) == (1, 8), run
        devices = {name for name in metrics if name.startswith("device/")}
        assert devices == {f"device/{name}" for name in rank0["device_stats"]}, run
    assert ray_result(ray_runs, "cpu")["metrics"]["device/memory_total_bytes"] > 0


def test_the_result_holds_the_trainers_last_checkpoint(ray_runs: Path) -> None:
    for run, part in (("cpu", "trainer"), ("openreg", "trainer")):
        checkpoint = Path(ray_result(ray_runs, run)["checkpoint"])
        assert checkpoint.is_relative_to(ray_runs / "storage" / run)  # in Ray's storage
        last = ray_runs / run / part / "checkpoints/run-0/last.ckpt"
        assert (checkpoint / "last.ckpt").read_bytes() == last.read_bytes(), run
        meta = json.loads((checkpoint / "accelctl.json").read_text())
        assert (meta["run"], meta["step"], meta["file"]) == ("run-0", 8, "last.ckpt")
        # Rank 0 laid it out for Ray in the run folder, and removed it once Ray had copied it.
        assert not list(last.parent.glob(".ray-report-*")), run


def test_a_second_fit_of_the_run_resumes_from_rays_checkpoint_bit_identical(
    ray_runs: Path,
) -> None:
    resubmit = ray_runs / "resubmit"
    first = ray_result(ray_runs, "resubmit", "first.json")
    assert first["error"] is not None and "the first fit() fails here" in first["error"]
    assert ray_result(ray_runs, "resubmit")["error"] is None
    # The second fit's root_dir was empty: it started from Ray's latest checkpoint, the one
    # the first fit reported at step 6, in Ray's storage.
    record = json.loads((resubmit / "trainer-b/checkpoints/run-0/run.json").read_text())
    started_from = Path(record["started_from"])
    assert started_from.is_relative_to(ray_runs / "storage" / "resubmit")
    lines = [json.loads(line) for line in (resubmit / "trainer-b/metrics.jsonl").open()]
    assert {line["restart"] for line in lines} == {1}  # one more than the checkpoint's
    assert min(line["step"] for line in lines if line["kind"] == "step") == 8
    for rank in (0, 1):
        assert_equal(weights(resubmit, "trainer-b", rank), weights(ray_runs / "cpu", "trainer", 0))


def test_the_trainer_trains_on_a_ray_data_shard_each_worker_its_own_rows(ray_runs: Path) -> None:
    raydata = ray_runs / "raydata"
    seen = [report(raydata, "trainer", rank) for rank in (0, 1)]
    for epoch in ("0", "1"):
        ids = [set(worker["ids"][epoch]) for worker in seen]
        assert [len(worker["ids"][epoch]) for worker in seen] == [32, 32]  # no row twice
        assert not ids[0] & ids[1] and ids[0] | ids[1] == set(range(64))
    assert seen[0]["world_size"] == 2
    assert math.isfinite(ray_result(ray_runs, "raydata")["metrics"]["train_loss"])


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


def driver_lines(stderr: str) -> list[str]:
    """Return the driver's own lines of ``stderr``, not what Ray forwards from its actors.

    Ray prefixes each forwarded line with the actor (``(RayTrainWorker pid=...)``, coloured).
    """
    return [line for line in stderr.splitlines() if not line.startswith(("\x1b[", "("))]


def test_a_workers_missing_kernel_ends_the_drivers_script_with_accelctls_one_line(
    ray_runs: Path,
) -> None:
    """A driver ending on Ray's WorkerGroupError shows accelctl's line, in Ray Train's words.

    The error carries the workers' MissingKernelError; the line has its ways out in Ray Train's
    words, and no traceback.
    """
    record = json.loads((ray_runs / "kernels.json").read_text())
    stderr = record["stderr"]
    assert record["returncode"] == 1, stderr[-4000:]
    own = driver_lines(stderr)
    assert not [line for line in own if "Traceback" in line], stderr[-4000:]
    [line] = [line for line in own if line.startswith("accelctl: ")]
    assert re.match(
        r"accelctl: aten::convolution has no kernel for openreg:[01] \(plugin privateuse1\), "
        r"called by Conv2d at features\.0: to train on the CPU, pass TorchConfig\(\"cpu\"\) and "
        r"leave 'openreg' out of ScalingConfig\(resources_per_worker=\.\.\.\); to run the kernels "
        r"the device lacks on the CPU, ACCELCTL_CPU_FALLBACK=1 \S+ \S+ray_kernels_run\.py ",
        line,
    ), line
    # What Ray logs of each worker's error is accelctl's, without torch's error behind it.
    assert "convolution_overrideable" not in stderr
    assert not (ray_runs / "kernels" / "stopped" / "rank0.pt").exists()


def test_the_drivers_cpu_fallback_trains_the_workers_to_the_cpu_runs_weights(
    ray_runs: Path,
) -> None:
    """ACCELCTL_CPU_FALLBACK=1 set in the driver alone reaches the workers on their node."""
    kernels = ray_runs / "kernels"
    for rank in (0, 1):
        seen = report(kernels, "fallback", rank)
        assert seen["device"] == f"openreg:{rank}"
        assert seen["metrics"]["cpu_fallback_calls"] > 0
        assert report(kernels, "cpu", rank)["device"] == "cpu"
        assert_equal(weights(kernels, "fallback", rank), weights(kernels, "cpu", 0))

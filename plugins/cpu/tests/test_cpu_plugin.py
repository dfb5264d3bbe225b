"""The CPU plugin through its handle, as the core sees it once pip-installed."""

from __future__ import annotations

import pytest
import torch

import accelctl


@pytest.fixture
def cpu() -> accelctl.AcceleratorHandle:
    return accelctl.get_accelerator("cpu")


def test_identity_and_info(cpu: accelctl.AcceleratorHandle) -> None:
    assert (cpu.name, cpu.distribution, cpu.entry_point) == (
        "cpu",
        "accelctl-cpu",
        "accelctl_cpu:CPUAccelerator",
    )
    assert cpu.info.priority == 0 and cpu.info.distributed_backend == "gloo"
    assert cpu.info.family is None
    assert cpu.detect() is True and cpu.auto_device_count() == 1
    assert cpu.unavailable_reason() is None


@pytest.mark.parametrize(("spec", "count"), [("auto", 1), (3, 3), ("2", 2)])
def test_process_count_round_trip(
    cpu: accelctl.AcceleratorHandle, spec: object, count: int
) -> None:
    parsed = cpu.parse_devices(spec)
    assert parsed == count
    assert cpu.get_parallel_devices(parsed) == [torch.device("cpu")] * count


@pytest.mark.parametrize("spec", [-1, "0,1", [0], 0, None, True, 1.5, "abc"])
def test_bad_specs(cpu: accelctl.AcceleratorHandle, spec: object) -> None:
    with pytest.raises(accelctl.DeviceSpecError, match="cpu takes a process count"):
        cpu.parse_devices(spec)


def test_device_stats(cpu: accelctl.AcceleratorHandle) -> None:
    stats = cpu.device_stats(torch.device("cpu"))
    assert set(stats) == {"cpu_percent", "memory_used_bytes", "memory_total_bytes", "swap_percent"}
    assert isinstance(stats["memory_total_bytes"], int)
    assert 0 < stats["memory_used_bytes"] < stats["memory_total_bytes"]
    assert 0.0 <= stats["cpu_percent"] <= 100.0 * (torch.get_num_threads() + 64)
    assert 0.0 <= stats["swap_percent"] <= 100.0
    assert cpu.device_stats("cpu").keys() == stats.keys()  # a string device is accepted too


def test_setup_and_teardown_are_no_ops(cpu: accelctl.AcceleratorHandle) -> None:
    assert not cpu.implements("setup_device") and not cpu.implements("teardown")
    cpu.setup_device(torch.device("cpu"))
    cpu.teardown()

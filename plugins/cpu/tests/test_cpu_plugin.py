"""The CPU plugin through its handle, as the core sees it once pip-installed."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import accelctl
import accelctl.stats_keys
from accelctl_cpu import CPUAccelerator


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
    assert set(stats) == {
        "utilization_percent",
        "cpu_percent",
        "memory_used_bytes",
        "memory_total_bytes",
        "swap_percent",
    }
    assert isinstance(stats["memory_total_bytes"], int)
    assert 0 < stats["memory_used_bytes"] < stats["memory_total_bytes"]
    assert 0.0 <= stats["utilization_percent"] <= 100.0
    assert stats["cpu_percent"] == stats["utilization_percent"]  # one reading, two names
    assert 0.0 <= stats["swap_percent"] <= 100.0
    assert cpu.device_stats("cpu").keys() == stats.keys()  # a string device is accepted too
    assert accelctl.stats_keys.problems(stats, ["cpu."]) == []  # the vocabulary's keys and units


def test_device_peak_is_unknown_unless_declared() -> None:
    assert accelctl.get_accelerator("cpu").device_peak("cpu") is None
    declared = accelctl.AcceleratorHandle.from_object(CPUAccelerator(peak=2e12), "cpu")
    peak = declared.device_peak(torch.device("cpu"))
    assert peak is not None and peak.flops["float32"] == peak.flops["bfloat16"] == 2e12
    assert peak.source == "declared: CPUAccelerator(peak=...)"
    fields = {"flops": {"bfloat16": 4e12}, "memory_bandwidth_bytes_per_second": 1e11}
    mapped = CPUAccelerator(peak=fields).device_peak("cpu")
    assert mapped is not None and mapped.flops == {"bfloat16": 4e12}
    assert mapped.memory_bandwidth_bytes_per_second == 1e11


@pytest.mark.parametrize(
    ("peak", "message"),
    [
        ("2e12", "give an accelctl.DevicePeak, a dict of its fields, FLOPs per second"),
        ({"flops": {"fp32": 1e12}}, "unknown data type 'fp32'; accepted: float64, float32"),
        (-1.0, "flops\\['float64'\\] must be a finite number > 0, not -1.0"),
    ],
)
def test_a_declared_peak_that_means_nothing_is_refused_by_name(peak: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        CPUAccelerator(peak=peak)


def test_setup_and_teardown_are_no_ops(cpu: accelctl.AcceleratorHandle) -> None:
    assert not cpu.implements("setup_device") and not cpu.implements("teardown")
    cpu.setup_device(torch.device("cpu"))
    cpu.teardown()

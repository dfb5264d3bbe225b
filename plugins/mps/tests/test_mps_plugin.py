"""The MPS plugin, on this Linux machine and on a faked macOS.

``sys.platform`` and ``torch.backends.mps`` / ``torch.mps`` stand in for a Mac's hardware; the
plugin runs for real."""

from __future__ import annotations

import sys

import psutil
import pytest
import torch

import accelctl
from accelctl_mps import MPSAccelerator

mps = MPSAccelerator()


@pytest.fixture
def mac(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """A Mac whose torch has MPS built and available (flip the flags to change that)."""
    state = {"built": True, "available": True}
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: state["built"])
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: state["available"])
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 3 << 20)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 8 << 20)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 21 << 30, raising=False)
    return state


def test_off_macos_says_no_without_torch(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: pytest.fail("torch asked"))
    assert mps.detect() is False
    assert mps.auto_device_count() == 0
    assert mps.unavailable_reason() == "not macOS (MPS is Apple's Metal backend; this is linux)"
    with pytest.raises(accelctl.DeviceSpecError, match="single device and it is not available"):
        mps.parse_devices("auto")


def test_mac_with_mps(mac: dict[str, bool]):
    assert mps.detect() is True
    assert mps.unavailable_reason() is None
    assert mps.auto_device_count() == 1
    for spec in ("auto", -1, 1, "1", [0], "0,", " auto "):
        assert mps.parse_devices(spec) == [0], spec
    assert mps.get_parallel_devices([0]) == [torch.device("mps", 0)]


@pytest.mark.parametrize("spec", [2, "2", [1], "0,1", 0, "abc", None])
def test_more_than_one_device_is_refused(mac: dict[str, bool], spec: object):
    with pytest.raises(accelctl.DeviceSpecError, match="mps exposes a single device") as caught:
        mps.parse_devices(spec)
    assert repr(spec) in str(caught.value)


def test_mac_without_mps_says_why(mac: dict[str, bool]):
    mac["available"] = False
    assert mps.detect() is False
    assert "no usable Metal GPU" in (mps.unavailable_reason() or "")
    mac["built"] = False
    assert "was built without MPS" in (mps.unavailable_reason() or "")


def test_stats_give_allocator_and_unified_memory(mac: dict[str, bool], monkeypatch):
    stats = accelctl.get_accelerator("mps").device_stats("mps:0")
    assert stats["memory_allocated_bytes"] == 3 << 20
    assert stats["memory_reserved_bytes"] == 8 << 20
    assert stats["mps.recommended_max_memory_bytes"] == 21 << 30
    assert stats["memory_total_bytes"] == psutil.virtual_memory().total
    assert 0 < stats["memory_used_bytes"] <= stats["memory_total_bytes"]
    assert all(isinstance(v, int) for v in stats.values())
    monkeypatch.delattr(torch.mps, "recommended_max_memory")  # torch < 2.5
    assert "mps.recommended_max_memory_bytes" not in mps.device_stats(torch.device("mps"))


def test_stats_off_macos_are_system_memory_only(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "platform", "linux")
    stats = mps.device_stats(torch.device("mps"))
    assert set(stats) == {"memory_used_bytes", "memory_total_bytes"}


def test_info_single_process_gpu():
    info = mps.accelerator_info()
    assert (info.family, info.priority, info.distributed_backend) == ("gpu", 100, None)


def test_gpu_selects_mps_on_a_mac_and_auto_prefers_it_to_the_cpu(
    mac: dict[str, bool], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,cuda,mps")  # the in-repo plugins only
    selection = accelctl.resolve("gpu")
    assert (selection.accelerator.name, [str(d) for d in selection.devices]) == ("mps", ["mps:0"])
    assert selection.distributed_backend is None
    assert accelctl.resolve("auto").accelerator.name == "mps"
    with pytest.raises(accelctl.DeviceSpecError, match="single device"):
        accelctl.resolve("mps", devices=2)


def test_way_back_to_the_cpu(mac: dict[str, bool], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ACCELCTL_ACCELERATOR", "cpu")
    assert accelctl.resolve().accelerator.name == "cpu"


def test_teardown_empties_the_cache(mac: dict[str, bool], monkeypatch: pytest.MonkeyPatch):
    emptied: list[bool] = []
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: emptied.append(True))
    mps.teardown()
    mac["available"] = False
    mps.teardown()
    assert emptied == [True]


def test_environment_info_reports_macos_and_the_mps_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.delenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", raising=False)
    assert mps.environment_info() == {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr("platform.mac_ver", lambda: ("14.4.1", ("", "", ""), "arm64"))
    assert mps.environment_info() == {
        "macos": "14.4.1",
        "PYTORCH_ENABLE_MPS_FALLBACK": "1",
    }

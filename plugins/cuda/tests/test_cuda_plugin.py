"""The CUDA plugin on fake hardware.

A fake NVML (``pynvml``), fake driver files, a fake KFD topology, and torch's build faked through
``torch.version``.

The fakes stand in for the hardware and the driver only; the plugin's code (probe, visible-device
parsing, torch-build reading, stats) runs for real.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import accelctl
from accelctl_cuda import CUDAAccelerator, amd, nvml, peaks, probe
from accelctl_cuda.visible import PhysicalGpu, parse_entries, visible_amd, visible_nvidia

cuda = CUDAAccelerator()

UUIDS = [
    "GPU-aaaa1111-0000-0000-0000-000000000000",
    "GPU-aaaa2222-0000-0000-0000-000000000000",
    "GPU-bbbb3333-0000-0000-0000-000000000000",
    "GPU-cccc4444-0000-0000-0000-000000000000",
]


# -- fake hardware --------------------------------------------------------------------------


class FakeNVMLError(Exception):
    """pynvml.NVMLError stand-in."""


@dataclass
class FakeGpu:
    uuid: str
    used: int = 1 << 30
    total: int = 80 << 30
    util: int | None = 42
    memory_util: int = 7
    temperature: int = 55
    power_mw: int | None = 123_456
    limit_mw: int = 700_000
    sm_clock_mhz: int = 1980
    name: str = "NVIDIA H100 80GB HBM3"
    #: A query NVML fails this time with an error other than "Not Supported" (a lost sensor).
    failing: str | None = None
    migs: list[str] = field(default_factory=list)


class FakeNvml:
    """An NVIDIA driver as NVML shows it: GPUs, a driver version, calls counted."""

    def __init__(self, gpus: list[FakeGpu], cuda_driver: int = 12080) -> None:
        self.gpus = gpus
        self.cuda_driver = cuda_driver
        self.init_error: str | None = None
        self.calls: list[str] = []

    def module(self) -> types.ModuleType:
        fake = types.ModuleType("pynvml")
        fake.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
        fake.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
        fake.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(fake, name, getattr(self, name))
        return fake

    def _gpu(self, handle: Any) -> FakeGpu:
        return handle if isinstance(handle, FakeGpu) else handle[0]

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
            if uuid in gpu.migs:
                return (gpu, uuid)  # a MIG instance's handle
        raise FakeNVMLError("Not Found")

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        return (handle[1] if isinstance(handle, tuple) else handle.uuid).encode()

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> tuple[int, int]:
        return (1, 1) if handle.migs else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, slot: int) -> Any:
        if slot >= len(handle.migs):
            raise FakeNVMLError("Not Found")
        return (handle, handle.migs[slot])

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        return types.SimpleNamespace(used=gpu.used, total=gpu.total, free=gpu.total - gpu.used)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        if isinstance(handle, tuple) or gpu.util is None:
            raise FakeNVMLError("Not Supported")  # NVML has no utilisation for a MIG instance
        return types.SimpleNamespace(gpu=gpu.util, memory=gpu.memory_util)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if self._gpu(handle).failing == "temperature":
            raise FakeNVMLError("Unknown Error")
        return self._gpu(handle).temperature

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        assert clock == 1  # NVML_CLOCK_SM
        return self._gpu(handle).sm_clock_mhz

    def nvmlDeviceGetName(self, handle: Any) -> bytes:
        self.calls.append("nvmlDeviceGetName")
        return self._gpu(handle).name.encode()  # bytes, as older nvidia-ml-py releases give

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        power = self._gpu(handle).power_mw
        if power is None:
            raise FakeNVMLError("Not Supported")
        return power

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._gpu(handle).limit_mw


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty Linux machine (no driver files) whose file system root is ``tmp_path``."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(nvml, "ROOT", tmp_path)
    monkeypatch.setattr(amd, "ROOT", tmp_path)
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    probe.forget()
    yield tmp_path
    probe.forget()  # the next test's machine is another one


def _touch(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    probe.forget()  # the machine changed: the plugin caches its look per process


def _torch(
    monkeypatch: pytest.MonkeyPatch, version: str, cuda: str | None, hip: str | None
) -> None:
    probe.forget()
    monkeypatch.setattr(torch.version, "__version__", version)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)


def install_nvidia(
    root: Path, monkeypatch: pytest.MonkeyPatch, count: int = 2, torch_cuda: str | None = "12.8"
) -> FakeNvml:
    """An NVIDIA machine: driver files, ``count`` GPUs in NVML, and a torch built for CUDA."""
    _touch(root, "dev/nvidiactl")
    _touch(root, "dev/nvidia0")
    fake = FakeNvml([FakeGpu(uuid) for uuid in UUIDS[:count]])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    probe.forget()
    _torch(monkeypatch, f"2.13.0+cu{(torch_cuda or '').replace('.', '')}", torch_cuda, None)
    return fake


def install_amd(root: Path, monkeypatch: pytest.MonkeyPatch, count: int = 2) -> None:
    """An AMD machine: /dev/kfd, a CPU node and ``count`` GPU nodes, and a ROCm torch."""
    _touch(root, "dev/kfd")
    nodes = "sys/class/kfd/kfd/topology/nodes"
    _touch(root, f"{nodes}/0/properties", "cpu_cores_count 64\nsimd_count 0\n")
    for gpu in range(count):
        minor = 128 + gpu
        _touch(root, f"{nodes}/{gpu + 1}/properties", f"simd_count 304\ndrm_render_minor {minor}\n")
        device = f"sys/class/drm/renderD{minor}/device"
        _touch(root, f"{device}/mem_info_vram_used", f"{(gpu + 1) << 30}\n")
        _touch(root, f"{device}/mem_info_vram_total", f"{192 << 30}\n")
        _touch(root, f"{device}/gpu_busy_percent", "37\n")
        _touch(root, f"{device}/hwmon/hwmon3/temp1_input", "48000\n")
        _touch(root, f"{device}/hwmon/hwmon3/power1_average", "250500000\n")
    _touch(root, "sys/module/amdgpu/version", "6.10.5\n")
    _torch(monkeypatch, "2.13.0+rocm6.3", None, "6.3.42131")


# -- no GPU ---------------------------------------------------------------------------------


def test_no_driver_says_no_without_nvml_or_torch(machine: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FakeNvml([FakeGpu(UUIDS[0])])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    assert cuda.detect() is False
    assert cuda.auto_device_count() == 0
    assert cuda.unavailable_reason() == "no NVIDIA or AMD GPU driver found"
    assert fake.calls == []  # NVML never asked: the missing driver files were enough


def test_macos_is_never_cuda(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_nvidia(machine, monkeypatch)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cuda.detect() is False
    assert "macOS" in (cuda.unavailable_reason() or "")


def test_list_on_this_gpu_less_machine_imports_neither_torch_nor_nvml(tmp_path: Path):
    """Check the real `accelctl list` path on a machine without a GPU, in a fresh interpreter.

    Cuda unavailable with a reason, no error, and neither torch nor pynvml imported."""
    if Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists():
        pytest.skip("this machine has a GPU driver")
    code = textwrap.dedent(
        """
        import json, sys
        from accelctl.cli import cli
        try:
            cli.main(["list", "--json"], standalone_mode=False)
        finally:
            print(json.dumps({"torch": "torch" in sys.modules, "pynvml": "pynvml" in sys.modules}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    listing, _, imported = out.rpartition("\n{")
    rows = {row["name"]: row for row in json.loads(listing)}
    assert json.loads("{" + imported) == {"torch": False, "pynvml": False}
    assert rows["cuda"]["available"] is False
    assert rows["cuda"]["device_count"] == 0
    assert rows["cuda"]["reason"] == "no NVIDIA or AMD GPU driver found"
    assert rows["cuda"]["error"] is None
    assert rows["cpu"]["available"] is True


# -- NVIDIA ---------------------------------------------------------------------------------


def test_nvidia_gpus_are_detected_and_cuda_stays_uninitialised(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_nvidia(machine, monkeypatch, count=2)
    assert cuda.detect() is True
    assert cuda.unavailable_reason() is None
    assert cuda.auto_device_count() == 2
    assert cuda.parse_devices("auto") == [0, 1]
    assert cuda.parse_devices(" 1, ") == [1]
    devices = cuda.get_parallel_devices([0, 1])
    assert devices == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert [str(d) for d in cuda.get_parallel_devices(1)] == ["cuda:0"]
    assert torch.cuda.is_initialized() is False


def test_more_devices_than_visible_is_a_device_spec_error(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_nvidia(machine, monkeypatch, count=2)
    with pytest.raises(accelctl.DeviceSpecError, match=r"devices=3 asks for 3 devices.*2 cuda"):
        cuda.parse_devices(3)


def test_cpu_only_torch_with_a_gpu_is_unavailable_with_a_reason_not_an_error(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_nvidia(machine, monkeypatch, count=1)
    _torch(monkeypatch, "2.13.0+cpu", None, None)
    assert cuda.detect() is False
    reason = cuda.unavailable_reason() or ""
    assert reason.startswith("torch 2.13.0+cpu is a CPU-only build; install a CUDA build")
    row = {r.name: r for r in accelctl.list_accelerators()}["cuda"]
    assert (row.available, row.device_count, row.error) == (False, 0, None)
    assert row.reason == reason


def test_nvml_failure_and_missing_nvidia_ml_py_are_reasons(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch)
    fake.init_error = "Driver/library version mismatch"
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    assert cuda.detect() is False
    assert cuda.unavailable_reason() == (
        "NVIDIA driver files exist, but NVML failed to initialise: Driver/library version mismatch"
    )
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import raises ImportError
    probe.forget()
    assert "nvidia-ml-py is not installed" in (cuda.unavailable_reason() or "")


def test_driver_older_than_torchs_cuda_is_unavailable(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch, torch_cuda="12.8")
    fake.cuda_driver = 11080
    assert cuda.detect() is False
    reason = cuda.unavailable_reason() or ""
    assert "supports CUDA up to 11.8" in reason and "needs CUDA 12.8" in reason
    fake.cuda_driver = 12020  # CUDA minor-version compatibility: 12.2 runs a 12.8 build
    probe.forget()
    assert cuda.detect() is True


def test_hip_torch_on_an_nvidia_machine_says_so(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_nvidia(machine, monkeypatch)
    _torch(monkeypatch, "2.13.0+rocm6.3", None, "6.3.1")
    assert cuda.detect() is False
    assert "is a ROCm (HIP) build, but no AMD GPU driver" in (cuda.unavailable_reason() or "")


@pytest.mark.parametrize(
    ("value", "physical"),
    [
        ("", []),
        ("1,3", [1, 3]),
        (" 2 , 0 ", [2, 0]),
        ("0,1,-1,2", [0, 1]),  # a negative entry ends the list
        ("0,7,1", [0]),  # an index out of range ends the list
        ("1gpu,2", [1, 2]),  # strtoul-like
        ("abc,0", []),
        ("0,0", []),  # a device named twice hides every device
        (f"0,{UUIDS[0]}", []),  # the same GPU by index and by UUID
        ("GPU-bbbb", [2]),  # a unique UUID prefix
        ("gpu-CCCC4444,1", [3, 1]),  # case-insensitive, mixed with an index
        ("GPU-aaaa,1", []),  # an ambiguous prefix ends the list
        ("GPU-ffff", []),  # no such GPU
    ],
)
def test_cuda_visible_devices_forms(value: str, physical: list[int]):
    gpus = [PhysicalGpu(i, uuid) for i, uuid in enumerate(UUIDS)]
    visible = visible_nvidia(gpus, {"CUDA_VISIBLE_DEVICES": value})
    assert [gpu.physical_index for gpu in visible] == physical


def test_cuda_visible_devices_unset_means_all_and_mig_means_one():
    gpus = [PhysicalGpu(0, UUIDS[0], ("MIG-1111", "MIG-2222")), PhysicalGpu(1, UUIDS[1])]
    assert len(visible_nvidia(gpus, {})) == 2
    mig = visible_nvidia(gpus, {"CUDA_VISIBLE_DEVICES": "MIG-2222,MIG-1111"})
    assert [(g.physical_index, g.mig_uuid) for g in mig] == [(0, "MIG-2222")]  # one per process
    legacy = visible_nvidia(gpus, {"CUDA_VISIBLE_DEVICES": f"MIG-{UUIDS[1]}/1/0"})
    assert [g.physical_index for g in legacy] == [1]
    assert parse_entries("3, GPU-Ab ,x,1") == [3, "GPU-ab"]


def test_cuda_visible_devices_is_honoured_end_to_end(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_nvidia(machine, monkeypatch, count=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-aaaa2")
    assert cuda.auto_device_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda.detect() is False
    assert cuda.unavailable_reason() == "CUDA_VISIBLE_DEVICES='' hides every GPU (4 installed)"
    with pytest.raises(accelctl.DeviceSpecError, match="no cuda device is visible"):
        cuda.parse_devices("auto")


# -- stats ----------------------------------------------------------------------------------


def test_stats_read_nvml_without_initialising_cuda(machine: Path, monkeypatch: pytest.MonkeyPatch):
    fake = install_nvidia(machine, monkeypatch, count=4)
    fake.gpus[3] = FakeGpu(UUIDS[3], used=5 << 30, util=88, temperature=71, power_mw=301_500)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,0")
    stats = accelctl.get_accelerator("cuda").device_stats("cuda:0")  # checked by the core too
    assert stats == {
        "memory_used_bytes": 5 << 30,
        "memory_total_bytes": 80 << 30,
        "utilization_percent": 88.0,
        "cuda.memory_busy_percent": 7.0,
        "temperature_celsius": 71.0,
        "power_watts": 301.5,
        "cuda.power_limit_watts": 700.0,
        "cuda.sm_clock_hz": 1_980_000_000,
    }
    assert all(
        type(v) is (int if k.endswith(("_bytes", "_hz")) else float) for k, v in stats.items()
    )
    assert torch.cuda.is_initialized() is False


def test_a_figure_nvml_fails_to_read_this_time_is_nan_not_absent(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch, count=1)
    fake.gpus[0].failing = "temperature"
    stats = accelctl.get_accelerator("cuda").device_stats("cuda:0")
    assert math.isnan(stats["temperature_celsius"])  # supported, not available now
    assert stats["utilization_percent"] == 42.0
    fake.gpus[0].failing = None
    assert accelctl.get_accelerator("cuda").device_stats("cuda:0")["temperature_celsius"] == 55.0


def test_stats_leave_out_what_a_device_cannot_report(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch, count=1)
    fake.gpus[0].migs = ["MIG-5555"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5555")
    stats = cuda.device_stats(torch.device("cuda", 0))
    assert "utilization_percent" not in stats  # NVML has none for a MIG instance
    assert stats["memory_total_bytes"] == 80 << 30
    fake.gpus[0].power_mw = None
    assert "power_watts" not in cuda.device_stats(torch.device("cuda", 0))
    assert cuda.device_stats(torch.device("cuda", 5)) == {}  # no such device


def test_stats_with_cuda_in_use_add_the_allocator_and_find_the_gpu_by_uuid(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch, count=2)
    fake.gpus[1].used = 9 << 30
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i: calls.append(i) or 1000)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: 2048)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda i: 4096)
    monkeypatch.setattr(
        torch.cuda, "memory_stats", lambda i: {"num_alloc_retries": 3, "num_ooms": 1, "x": 9}
    )
    # CUDA's device 0 is NVML's GPU 1 (CUDA_DEVICE_ORDER=FASTEST_FIRST): the UUID tells.
    props = types.SimpleNamespace(uuid=UUIDS[1].removeprefix("GPU-"))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    stats = cuda.device_stats(torch.device("cuda", 0))
    assert calls == [0]
    assert stats["memory_allocated_bytes"] == 1000
    assert stats["memory_reserved_bytes"] == 2048
    assert stats["memory_peak_allocated_bytes"] == 4096
    assert (stats["cuda.num_alloc_retries"], stats["cuda.num_ooms"]) == (3, 1)
    assert stats["memory_used_bytes"] == 9 << 30
    assert not any(key.startswith("x") for key in stats)  # never the raw memory_stats dump


# -- peak -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "board"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10", "A10"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla T4", "T4"),
    ],
)
def test_the_datasheet_table_finds_a_board_by_its_name(name: str, board: str) -> None:
    peak = peaks.peak_of(name)
    assert peak is not None and peak.source == f"NVIDIA {board} datasheet (dense, boost clock)"


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA L40", "NVIDIA GeForce RTX 4090", ""])
def test_a_board_the_table_does_not_know_is_unknown_not_a_near_match(name: str) -> None:
    assert peaks.peak_of(name) is None


def test_peak_of_an_nvidia_gpu_by_its_nvml_name_without_initialising_cuda(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch, count=2)
    fake.gpus[1].name = "NVIDIA A100-SXM4-40GB"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    handle = accelctl.get_accelerator("cuda")
    a100, h100 = handle.device_peak("cuda:0"), handle.device_peak(torch.device("cuda", 1))
    assert a100 is not None and h100 is not None
    assert a100.flops["bfloat16"] == 312e12 and a100.memory_bandwidth_bytes_per_second == 1555e9
    assert (h100.flops["bfloat16"], h100.flops["tf32"]) == (989.5e12, 494.5e12)
    assert "nvmlDeviceGetName" in fake.calls
    assert torch.cuda.is_initialized() is False


def test_peak_is_unknown_for_a_mig_instance_and_an_unlisted_gpu(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch, count=1)
    fake.gpus[0].name = "NVIDIA GeForce RTX 4090"
    assert accelctl.get_accelerator("cuda").device_peak("cuda:0") is None
    fake.gpus[0].name = "NVIDIA H100 80GB HBM3"
    fake.gpus[0].migs = ["MIG-5555"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5555")
    assert cuda.device_peak("cuda:0") is None  # a slice of the GPU: not the board's peak


def test_peak_is_unknown_on_amd(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_amd(machine, monkeypatch, count=1)
    assert cuda.detect() and cuda.device_peak("cuda:0") is None


def test_peak_with_cuda_in_use_reads_torchs_name(machine: Path, monkeypatch: pytest.MonkeyPatch):
    fake = install_nvidia(machine, monkeypatch, count=1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA L4")
    peak = cuda.device_peak(torch.device("cuda", 0))
    assert peak is not None and peak.flops["float8"] == 242.5e12
    assert "nvmlDeviceGetName" not in fake.calls


def test_stats_of_a_non_cuda_device_are_refused_by_name(machine: Path):
    with pytest.raises(accelctl.PluginHookError, match="takes a cuda device, not 'cpu'"):
        accelctl.get_accelerator("cuda").device_stats("cpu")


def test_setup_device_and_teardown(machine: Path, monkeypatch: pytest.MonkeyPatch):
    seen: list[object] = []
    monkeypatch.setattr(torch.cuda, "set_device", seen.append)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: seen.append("empty"))
    cuda.setup_device(torch.device("cuda", 1))
    cuda.teardown()  # CUDA not in use: nothing to empty, and no context created
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    cuda.teardown()
    assert seen == [torch.device("cuda", 1), "empty"]


def test_info_and_the_rocm_alias(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_nvidia(machine, monkeypatch)
    info = cuda.accelerator_info()
    assert (info.family, info.priority, info.distributed_backend) == ("gpu", 100, "nccl")
    assert info.aliases == ()  # "rocm" must not select NVIDIA GPUs
    install_amd(machine, monkeypatch)
    assert cuda.accelerator_info().aliases == ("rocm",)


# -- accelctl env ---------------------------------------------------------------------------


def test_environment_info_without_a_driver_asks_nothing(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = FakeNvml([FakeGpu(UUIDS[0])])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    assert cuda.environment_info() == {}
    assert fake.calls == []  # no driver files: NVML is not asked


def test_environment_info_reports_the_nvidia_driver_and_cuda_variables(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_nvidia(machine, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert cuda.environment_info() == {
        "nvidia_driver": "570.86.15",
        "cuda_driver_api": "12.8",
        "CUDA_VISIBLE_DEVICES": "GPU-1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert not torch.cuda.is_initialized()  # NVML only: no CUDA context


def test_environment_info_says_why_nvml_cannot_answer(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = install_nvidia(machine, monkeypatch)
    fake.init_error = "Driver/library version mismatch"
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    assert cuda.environment_info() == {
        "nvml": "NVML failed to initialise: Driver/library version mismatch"
    }


def test_environment_info_reports_the_amdgpu_driver_and_rocm_variables(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_amd(machine, monkeypatch)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1")
    assert cuda.environment_info() == {
        "amdgpu_driver": "6.10.5",
        "ROCR_VISIBLE_DEVICES": "1",
    }
    (machine / "sys/module/amdgpu/version").unlink()  # an in-kernel driver publishes none
    assert cuda.environment_info()["amdgpu_driver"] is None


# -- AMD ROCm -------------------------------------------------------------------------------


def test_rocm_gpus_are_cuda_devices(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_amd(machine, monkeypatch, count=2)
    assert cuda.detect() is True
    assert cuda.auto_device_count() == 2
    assert [str(d) for d in cuda.get_parallel_devices(cuda.parse_devices(-1))] == [
        "cuda:0",
        "cuda:1",
    ]
    assert accelctl.get_accelerator("rocm").name == "cuda"
    stats = cuda.device_stats(torch.device("cuda", 1))
    assert stats == {
        "memory_used_bytes": 2 << 30,
        "memory_total_bytes": 192 << 30,
        "utilization_percent": 37.0,
        "temperature_celsius": 48.0,
        "power_watts": 250.5,
    }


@pytest.mark.parametrize(
    ("variables", "physical"),
    [
        ({}, [0, 1, 2]),
        ({"HIP_VISIBLE_DEVICES": "2,0"}, [2, 0]),
        ({"CUDA_VISIBLE_DEVICES": "1"}, [1]),  # HIP honours CUDA_VISIBLE_DEVICES too
        ({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "2"}, [0]),
        ({"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"}, [2]),  # HIP indexes ROCR's
        ({"ROCR_VISIBLE_DEVICES": "GPU-deadbeef"}, [None]),
        ({"HIP_VISIBLE_DEVICES": ""}, []),
        ({"HIP_VISIBLE_DEVICES": "1,1"}, []),
    ],
)
def test_rocm_visible_device_variables(variables: dict[str, str], physical: list[int | None]):
    assert list(visible_amd(3, variables)) == physical


def test_rocm_variable_hiding_every_gpu_and_cuda_torch_on_amd(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_amd(machine, monkeypatch, count=2)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    assert cuda.unavailable_reason() == "HIP_VISIBLE_DEVICES='' hides every GPU (2 installed)"
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    _torch(monkeypatch, "2.13.0+cu128", "12.8", None)
    assert cuda.detect() is False
    assert "is a CUDA build, but this machine has an AMD GPU driver" in (
        cuda.unavailable_reason() or ""
    )
    _torch(monkeypatch, "2.13.0+cpu", None, None)
    assert "CPU-only build" in (cuda.unavailable_reason() or "")

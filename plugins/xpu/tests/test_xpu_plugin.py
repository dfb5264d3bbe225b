"""The XPU plugin on fake hardware.

A fake ``/sys`` and ``/dev`` tree (Intel GPUs bound to i915 or xe, render nodes, the Level Zero
loader), torch's build faked through ``torch.version``, and a fake ``torch.xpu`` (monkeypatched
functions) where the runtime would answer.

The fakes stand in for the hardware, the driver and torch's XPU runtime only; the plugin's code
(probe, visible-device parsing, torch-build reading, stats) runs for real.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed
from click.testing import CliRunner

import accelctl
from accelctl.cli import cli
from accelctl.testing import validate
from accelctl.torch_build import TorchBuild
from accelctl_xpu import XPUAccelerator, driver, runtime
from accelctl_xpu.visible import affinity_mask, device_selector, visible_devices

# The module, not the package's ``probe`` function of the same name.
probe = importlib.import_module("accelctl_xpu.probe")

xpu = XPUAccelerator()

# -- fake hardware --------------------------------------------------------------------------


def _touch(root: Path, relative: str, text: str = "") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    probe.forget()  # the machine changed: the plugin caches its look per process
    return path


def _card(root: Path, card: int, vendor: str, kernel_driver: str) -> None:
    """``/sys/class/drm/card<card>`` with its PCI vendor and a ``driver`` link to its driver."""
    device = root / f"sys/class/drm/card{card}/device"
    _touch(root, f"sys/class/drm/card{card}/device/vendor", f"{vendor}\n")
    target = root / "sys/bus/pci/drivers" / kernel_driver
    target.mkdir(parents=True, exist_ok=True)
    (device / "driver").symlink_to(target)


def _torch(monkeypatch: pytest.MonkeyPatch, version: str, xpu: str | None) -> None:
    probe.forget()  # the machine changed: the plugin caches its look per process
    monkeypatch.setattr(torch.version, "__version__", version)
    monkeypatch.setattr(torch.version, "xpu", xpu, raising=False)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Make an empty Linux machine whose file system root is ``tmp_path``.

    An empty Linux machine (no driver files) whose file system root is ``tmp_path``; Level
    Zero Sysman cannot count (as without ``pyzes``), and ``ldconfig`` knows no loader."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(driver, "ROOT", tmp_path)
    monkeypatch.setattr(driver, "find_library", lambda name: None)
    monkeypatch.setattr(TorchBuild, "lib_folders", property(lambda build: []))
    monkeypatch.setattr(torch.xpu, "_device_count_zes", lambda: -1, raising=False)
    for var in ("ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    _torch(monkeypatch, "2.13.0+cpu", None)
    yield tmp_path
    probe.forget()  # the next test's machine is another one


def install_intel(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    count: int = 2,
    kernel_driver: str = "xe",
    xpu_torch: bool = True,
    loader: bool = True,
) -> None:
    """Install a fake Intel GPU machine.

    ``count`` Intel GPUs after an NVIDIA one (card0), a display connector entry, render nodes, the
    Level Zero loader, and torch's XPU build."""
    _card(root, 0, "0x10de", "nvidia")
    for index in range(count):
        _card(root, index + 1, "0x8086", kernel_driver)
        _touch(root, f"dev/dri/renderD{128 + index}")
    (root / "sys/class/drm/card1-DP-1").mkdir(parents=True)  # a connector, not a GPU
    if loader:
        _touch(root, f"usr/lib/x86_64-linux-gnu/{driver.LOADER}")
    if xpu_torch:
        _torch(monkeypatch, "2.13.0+xpu", "20250101")


# -- no Intel GPU, or no XPU torch ------------------------------------------------------------


def test_no_driver_says_no_without_reading_torchs_build(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    def never() -> None:
        raise AssertionError("torch's build must not be read on a machine without an Intel GPU")

    monkeypatch.setattr("accelctl.torch_build.read_torch_build", never)
    _card(machine, 0, "0x10de", "nvidia")  # an NVIDIA GPU is not an Intel one
    assert xpu.detect() is False
    assert xpu.auto_device_count() == 0
    assert xpu.unavailable_reason() == (
        "no Intel GPU driver found (no i915 or xe GPU in /sys/class/drm)"
    )


def test_intel_gpu_without_a_kernel_driver_is_no_driver(machine: Path):
    _touch(machine, "sys/class/drm/card0/device/vendor", "0x8086\n")  # no driver bound
    assert "no Intel GPU driver found" in (xpu.unavailable_reason() or "")


def test_cpu_only_torch_with_an_intel_gpu_is_unavailable_with_a_reason(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_intel(machine, monkeypatch, kernel_driver="i915", xpu_torch=False)
    assert xpu.detect() is False
    assert xpu.unavailable_reason() == (
        "torch 2.13.0+cpu is not an XPU build; install torch's XPU build "
        "(pip install torch --index-url https://download.pytorch.org/whl/xpu)"
    )
    row = {r.name: r for r in accelctl.list_accelerators()}["xpu"]
    assert (row.available, row.device_count, row.error) == (False, 0, None)
    assert row.reason == xpu.unavailable_reason()


def test_macos_is_never_xpu(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert xpu.detect() is False
    assert xpu.unavailable_reason() == "Intel GPUs (xpu) do not run on macOS"


def test_list_on_this_machine_imports_no_torch_and_says_why(tmp_path: Path):
    """Check the real `accelctl list` path here, in a fresh interpreter.

    Xpu unavailable with a reason, no error, and torch not imported."""
    if driver.intel_gpus():
        pytest.skip("this machine has an Intel GPU")
    code = textwrap.dedent(
        """
        import json, sys
        from accelctl.cli import cli
        try:
            cli.main(["list", "--json"], standalone_mode=False)
        finally:
            print(json.dumps({"torch": "torch" in sys.modules}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    listing, _, imported = out.rpartition("\n{")
    rows = {row["name"]: row for row in json.loads(listing)}
    assert json.loads("{" + imported) == {"torch": False}
    assert (rows["xpu"]["available"], rows["xpu"]["device_count"]) == (False, 0)
    assert rows["xpu"]["reason"] == (
        "no Intel GPU driver found (no i915 or xe GPU in /sys/class/drm)"
    )
    assert (rows["xpu"]["family"], rows["xpu"]["priority"], rows["xpu"]["error"]) == (
        "gpu",
        100,
        None,
    )


def test_a_gpu_machine_with_a_cpu_torch_imports_no_torch(tmp_path: Path):
    """Check that a GPU machine with a CPU torch answers from the file, never importing torch.

    With an Intel GPU in a fake /sys, a fake torch package whose import fails and whose
    version.py says no XPU: the answer comes from the file, and torch is never imported."""
    fake_torch = tmp_path / "site" / "torch"
    fake_torch.mkdir(parents=True)
    (fake_torch / "__init__.py").write_text("raise ImportError('torch must not be imported')\n")
    (fake_torch / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.13.0+cpu'\nxpu: Optional[str] = None\n"
    )
    root = tmp_path / "root"
    _card(root, 0, "0x8086", "i915")
    _touch(root, "dev/dri/renderD128")
    code = (
        "import sys; from pathlib import Path; "
        "from accelctl_xpu import XPUAccelerator, driver; driver.ROOT = Path(sys.argv[1]); "
        "xpu = XPUAccelerator(); "
        "sys.platform = 'linux'; "
        "print(xpu.unavailable_reason()); "
        "print(xpu.accelerator_info().distributed_backend, 'torch' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake_torch.parent), *sys.path]))
    run = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "torch 2.13.0+cpu is not an XPU build; install torch's XPU build "
        "(pip install torch --index-url https://download.pytorch.org/whl/xpu)",
        "None False",
    ]


# -- the rest of the driver stack -------------------------------------------------------------


def test_a_render_node_this_user_may_not_open_is_a_reason(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_intel(machine, monkeypatch)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # tests may run as root
    assert xpu.unavailable_reason() == (
        "this user may not open /dev/dri/renderD128 "
        "(add it to the 'render' group: sudo usermod -aG render $USER)"
    )


def test_no_render_node_is_a_reason(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch)
    for node in (machine / "dev/dri").iterdir():
        node.unlink()
    assert xpu.unavailable_reason() == (
        "an Intel GPU driver is loaded, but /dev/dri has no render node "
        "(in a container, pass the device: --device /dev/dri)"
    )


def test_the_level_zero_loader_is_looked_for(
    machine: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    install_intel(machine, monkeypatch, loader=False)
    assert xpu.detect() is False
    assert xpu.unavailable_reason() == (
        "no Level Zero loader (libze_loader.so.1) found; install Intel's GPU runtime "
        "(the level-zero package) or add its folder to LD_LIBRARY_PATH"
    )
    own = _touch(tmp_path, f"oneapi/lib/{driver.LOADER}")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nowhere{os.pathsep}{own.parent}")
    probe.forget()
    assert xpu.detect() is True
    monkeypatch.delenv("LD_LIBRARY_PATH")
    asked: list[str] = []
    monkeypatch.setattr(driver, "find_library", lambda name: asked.append(name) or "ze.so")
    probe.forget()
    assert xpu.detect() is True  # ldconfig's cache, the last resort
    assert asked == ["ze_loader"]


# -- available ---------------------------------------------------------------------------------


def test_intel_gpus_are_detected_and_the_runtime_stays_unstarted(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_intel(machine, monkeypatch, count=2, kernel_driver="i915")

    def runtime_start() -> int:
        raise AssertionError("torch.xpu.device_count() may start the SYCL runtime")

    monkeypatch.setattr(torch.xpu, "device_count", runtime_start)
    monkeypatch.setattr(torch.xpu, "is_available", runtime_start)
    assert xpu.detect() is True
    assert xpu.unavailable_reason() is None
    assert xpu.auto_device_count() == 2
    assert probe.probe().counted_by == "sysfs"
    assert xpu.parse_devices("auto") == [0, 1]
    assert xpu.parse_devices(" 1, ") == [1]
    assert xpu.get_parallel_devices([0, 1]) == [
        torch.device("xpu", 0),
        torch.device("xpu", 1),
    ]
    assert [str(d) for d in xpu.get_parallel_devices(1)] == ["xpu:0"]
    with pytest.raises(accelctl.DeviceSpecError, match=r"devices=3 asks for 3 devices.*2 xpu"):
        xpu.parse_devices(3)
    assert torch.xpu.is_initialized() is False


def test_gpu_family_finds_xpu_where_no_other_gpu_is(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch, count=1)
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,xpu")
    selection = accelctl.resolve(accelerator="gpu", devices="auto")
    assert selection.accelerator.name == "xpu"
    assert [str(d) for d in selection.devices] == ["xpu:0"]


def test_level_zero_sysman_counts_tiles(machine: Path, monkeypatch: pytest.MonkeyPatch):
    """Check that one two-tile GPU is two devices under Level Zero's FLAT hierarchy.

    One two-tile GPU in /sys is two devices under Level Zero's FLAT hierarchy: Sysman (through
    torch, no SYCL runtime) says so, and ONEAPI_DEVICE_SELECTOR picks among its devices."""
    install_intel(machine, monkeypatch, count=1)
    monkeypatch.setattr(torch.xpu, "_device_count_zes", lambda: 2, raising=False)
    assert (probe.probe().visible, probe.probe().counted_by) == (2, "sysman")
    monkeypatch.setenv("ONEAPI_DEVICE_SELECTOR", "level_zero:1")
    assert xpu.auto_device_count() == 1
    monkeypatch.setattr(torch.xpu, "_device_count_zes", lambda: 0, raising=False)
    monkeypatch.delenv("ONEAPI_DEVICE_SELECTOR")
    assert xpu.unavailable_reason() == "Level Zero lists no Intel GPU that torch can use"


def test_a_process_already_using_xpu_asks_torch(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch, count=1)
    monkeypatch.setattr(torch.xpu, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 3)
    assert (probe.probe().visible, probe.probe().counted_by) == (3, "torch")


def test_windows_has_no_sys_and_no_fork_so_torch_counts(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    _torch(monkeypatch, "2.13.0+xpu", "20250101")
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 2)
    assert xpu.auto_device_count() == 2


# -- visible devices ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "kept"),
    [
        (None, [0, 1, 2, 3]),
        ("", [0, 1, 2, 3]),  # blank: no mask
        ("2,0", [0, 2]),  # a mask keeps the driver's order
        (" 1 , 3 ", [1, 3]),
        ("1.0,1.1", [1]),  # a device named through its sub-devices
        ("0.1,3", [0, 3]),
        ("7", []),  # past the last device
        ("x,2", [2]),  # entries that are not indices are ignored
        ("-1,1", [1]),
    ],
)
def test_ze_affinity_mask(mask: str | None, kept: list[int]):
    assert affinity_mask(mask, 4) == kept


@pytest.mark.parametrize(
    ("selector", "kept"),
    [
        (None, [0, 1, 2]),
        ("level_zero:*", [0, 1, 2]),
        ("level_zero:gpu", [0, 1, 2]),
        ("*:gpu", [0, 1, 2]),
        ("level_zero:2,0", [0, 2]),
        ("LEVEL_ZERO:1.0", [1]),
        ("level_zero:1.*", [1]),
        ("opencl:*", []),  # torch's XPU device is on Level Zero only
        ("level_zero:cpu", []),
        ("opencl:gpu;level_zero:1", [1]),
        ("!level_zero:1", [0, 2]),  # only a discard: everything else
        ("level_zero:*;!level_zero:0", [1, 2]),
        ("level_zero:9", []),
        ("garbage", [0, 1, 2]),  # a term this reader cannot read is ignored
    ],
)
def test_oneapi_device_selector(selector: str | None, kept: list[int]):
    assert device_selector(selector, 3) == kept


def test_the_selector_picks_among_what_the_mask_leaves():
    environ = {"ZE_AFFINITY_MASK": "1,2,3", "ONEAPI_DEVICE_SELECTOR": "level_zero:0,2"}
    assert visible_devices(4, environ) == [1, 3]


def test_variables_are_honoured_end_to_end(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch, count=3)
    monkeypatch.setenv("ZE_AFFINITY_MASK", "2,0")
    assert xpu.auto_device_count() == 2
    monkeypatch.setenv("ZE_AFFINITY_MASK", "7")
    assert xpu.detect() is False
    assert xpu.unavailable_reason() == "ZE_AFFINITY_MASK='7' hides every Intel GPU"
    monkeypatch.delenv("ZE_AFFINITY_MASK")
    monkeypatch.setenv("ONEAPI_DEVICE_SELECTOR", "opencl:gpu")
    assert xpu.unavailable_reason() == "ONEAPI_DEVICE_SELECTOR='opencl:gpu' hides every Intel GPU"
    with pytest.raises(accelctl.DeviceSpecError, match="no xpu device is visible"):
        xpu.parse_devices("auto")


# -- stats ---------------------------------------------------------------------------------------


def _fake_memory(monkeypatch: pytest.MonkeyPatch, calls: list[object]) -> None:
    monkeypatch.setattr(torch.xpu, "memory_allocated", lambda i: calls.append(i) or 1000)
    monkeypatch.setattr(torch.xpu, "memory_reserved", lambda i: 2048)
    monkeypatch.setattr(torch.xpu, "max_memory_allocated", lambda i: 4096)
    monkeypatch.setattr(torch.xpu, "mem_get_info", lambda i: (12 << 30, 16 << 30))


def test_stats_never_start_the_runtime(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch)
    calls: list[object] = []
    _fake_memory(monkeypatch, calls)
    assert xpu.device_stats(torch.device("xpu", 0)) == {}
    assert calls == []  # XPU not in use: torch's memory functions were not called
    assert torch.xpu.is_initialized() is False


def test_stats_of_a_process_using_xpu(machine: Path, monkeypatch: pytest.MonkeyPatch):
    install_intel(machine, monkeypatch)
    calls: list[object] = []
    _fake_memory(monkeypatch, calls)
    monkeypatch.setattr(torch.xpu, "is_initialized", lambda: True)
    expected = {
        "memory_allocated_bytes": 1000,
        "memory_reserved_bytes": 2048,
        "memory_peak_allocated_bytes": 4096,
        "memory_used_bytes": 4 << 30,
        "memory_total_bytes": 16 << 30,
    }
    assert xpu.device_stats(torch.device("xpu", 1)) == expected
    assert xpu.device_stats("xpu:1") == expected  # a string is accepted too
    assert accelctl.get_accelerator("xpu").device_stats("xpu:1") == expected
    assert calls == [1, 1, 1]
    monkeypatch.setattr(torch.xpu, "current_device", lambda: 0)
    xpu.device_stats(torch.device("xpu"))  # no index: the current device
    assert calls[-1] == 0

    def unsupported(index: int) -> tuple[int, int]:
        raise RuntimeError("the driver cannot report free memory")

    monkeypatch.setattr(torch.xpu, "mem_get_info", unsupported)
    stats = xpu.device_stats("xpu:0")
    assert "memory_total_bytes" not in stats and stats["memory_allocated_bytes"] == 1000


def test_stats_of_a_non_xpu_device_are_refused_by_name(machine: Path):
    with pytest.raises(ValueError, match="takes an xpu device, not 'cpu'"):
        xpu.device_stats("cpu")
    with pytest.raises(accelctl.PluginHookError, match="takes an xpu device, not 'cuda:0'"):
        accelctl.get_accelerator("xpu").device_stats("cuda:0")


def test_setup_device_and_teardown(machine: Path, monkeypatch: pytest.MonkeyPatch):
    seen: list[object] = []
    monkeypatch.setattr(torch.xpu, "set_device", seen.append)
    monkeypatch.setattr(torch.xpu, "empty_cache", lambda: seen.append("empty"))
    xpu.setup_device(torch.device("xpu", 1))
    xpu.teardown()  # XPU not in use: nothing to empty, and no runtime started
    monkeypatch.setattr(torch.xpu, "is_initialized", lambda: True)
    xpu.teardown()
    assert seen == [torch.device("xpu", 1), "empty"]


# -- info and the distributed backend ------------------------------------------------------------


def test_info_backend_is_xccl_only_where_this_build_has_it(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_intel(machine, monkeypatch)
    monkeypatch.setattr(torch.distributed, "is_xccl_available", lambda: True, raising=False)
    info = xpu.accelerator_info()
    assert (info.family, info.priority, info.distributed_backend) == ("gpu", 100, "xccl")
    assert info.aliases == ()
    monkeypatch.setattr(torch.distributed, "is_xccl_available", lambda: False)
    assert xpu.accelerator_info().distributed_backend is None
    monkeypatch.delattr(torch.distributed, "is_xccl_available")  # a torch without the check
    assert xpu.accelerator_info().distributed_backend is None


def test_info_does_not_ask_torch_without_an_xpu_build(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    install_intel(machine, monkeypatch, xpu_torch=False)

    def never() -> str:
        raise AssertionError("torch.distributed must not be asked without an XPU build")

    monkeypatch.setattr(runtime, "distributed_backend", never)
    assert xpu.accelerator_info().distributed_backend is None


def test_this_torch_build_has_no_xccl():
    """Check that the pinned CPU torch has no XCCL compiled in.

    The real check on the pinned CPU torch: XCCL is not compiled in, whatever the backend map
    says about xpu."""
    assert torch.distributed.Backend.default_device_backend_map.get("xpu") == "xccl"
    assert runtime.distributed_backend() is None


# -- conformance on this machine ----------------------------------------------------------------


def test_conformance_device_checks_pass_on_a_fake_intel_machine(
    machine: Path, monkeypatch: pytest.MonkeyPatch
):
    """Check that the device checks pass on a fake Intel machine, the runtime never started.

    With devices detected, the device checks run (not skip) and pass, and the runtime stays
    unstarted throughout."""
    install_intel(machine, monkeypatch, count=2)
    report = validate("xpu", probe_import=False)
    assert report.passed, report.failures
    for check in ("devices_auto", "devices_minus_one", "devices_one", "device_stats"):
        assert report.result(check).status == "pass", report.result(check)
    assert torch.xpu.is_initialized() is False


def test_validate_xpu_passes_on_this_machine_and_says_why_it_is_unavailable():
    result = CliRunner().invoke(cli, ["validate", "xpu", "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.output)
    assert report["name"] == "xpu" and report["passed"] is True
    if not xpu.detect():
        details = " ".join(check["detail"] or "" for check in report["checks"])
        assert (xpu.unavailable_reason() or "") in details


def test_environment_info_reports_the_device_selection_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    monkeypatch.setenv("ONEAPI_DEVICE_SELECTOR", "level_zero:0")
    assert xpu.environment_info() == {"ONEAPI_DEVICE_SELECTOR": "level_zero:0"}

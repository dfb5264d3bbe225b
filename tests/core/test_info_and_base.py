"""AcceleratorInfo normalisation and the Accelerator base class's defaults."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import accelctl
from accelctl import AcceleratorInfo


def test_info_normalises() -> None:
    info = AcceleratorInfo(family="GPU", aliases=["Gaudi", "gaudi", " hpu2 "])
    assert info.family == "gpu" and info.aliases == ("gaudi", "hpu2")
    assert info.to_dict() == {
        "description": "",
        "family": "gpu",
        "priority": 0,
        "distributed_backend": None,
        "aliases": ["gaudi", "hpu2"],
        "device_type": None,
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"priority": "high"}, "priority must be an int, not str"),
        ({"priority": True}, "priority must be an int, not bool"),
        ({"aliases": "gaudi"}, "aliases must be a tuple or list of str"),
        ({"aliases": ("no spaces",)}, "alias 'no spaces' is not a lowercase name"),
        ({"distributed_backend": 3}, "distributed_backend must be a str or None"),
        ({"description": None}, "description must be a str"),
        ({"device_type": "Open Reg"}, "device_type 'Open Reg' is not a torch device type"),
        ({"device_type": 3}, "device_type 3 is not a torch device type"),
    ],
)
def test_info_rejects_bad_fields(fields: dict[str, object], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        AcceleratorInfo(**fields)  # type: ignore[arg-type]


def test_coerce_dict_and_unknown_keys() -> None:
    assert AcceleratorInfo.coerce({"priority": 5}).priority == 5
    with pytest.raises(ValueError, match=r"unknown AcceleratorInfo field.*'prio'"):
        AcceleratorInfo.coerce({"prio": 5})
    with pytest.raises(TypeError, match="expected an AcceleratorInfo or a dict"):
        AcceleratorInfo.coerce(["gpu"])  # type: ignore[arg-type]


class XAccelerator(accelctl.Accelerator):
    name = "x"
    device_type = "cpu"
    priority = 42
    family = "gpu"
    aliases = ("ex",)

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2


def test_base_class_defaults_cover_the_other_hooks() -> None:
    handle = accelctl.AcceleratorHandle.from_object(XAccelerator())
    assert handle.info == AcceleratorInfo(
        priority=42, family="gpu", aliases=("ex",), device_type="cpu"
    )
    assert handle.parse_devices("-1") == [0, 1]
    assert handle.get_parallel_devices([1]) == [torch.device("cpu", 1)]
    assert handle.device_stats("cpu") == {}
    with pytest.raises(accelctl.DeviceSpecError, match="x: devices=3 asks for 3 devices"):
        handle.parse_devices(3)


def test_base_class_methods_are_hooks_without_markers() -> None:
    handle = accelctl.AcceleratorHandle.from_object(XAccelerator())
    for hook in (
        "detect",
        "auto_device_count",
        "parse_devices",
        "get_parallel_devices",
        "device_stats",
        "accelerator_info",
    ):
        assert handle.implements(hook), hook
    assert not handle.implements("setup_device")


def test_module_plugin_without_entry_point() -> None:
    import types

    module = types.ModuleType("loose")
    module.detect = accelctl.hookimpl(lambda: True)  # type: ignore[attr-defined]
    with pytest.raises(accelctl.PluginLoadError, match=r"required hook.*auto_device_count"):
        accelctl.AcceleratorHandle.from_object(module)


def test_the_helpers_add_no_hook() -> None:
    # Only hook names are hooks: the helpers leave a subclass's optional hooks unimplemented.
    handle = accelctl.AcceleratorHandle.from_object(XAccelerator())
    for hook in ("unavailable_reason", "environment_info", "setup_device", "teardown"):
        assert not handle.implements(hook), hook


def test_installed_torch_reads_the_build_and_says_none_for_a_broken_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build = accelctl.Accelerator.installed_torch()
    assert build is not None and build.version == torch.__version__

    def broken() -> None:
        raise ImportError("libtorch_cpu.so: cannot open shared object file")

    monkeypatch.setattr("accelctl._base.torch_build.read_torch_build", broken)
    assert XAccelerator.installed_torch() is None  # detect() says no rather than raise
    monkeypatch.setattr("accelctl._base.torch_build.read_torch_build", lambda: None)
    assert XAccelerator.installed_torch() is None
    assert XAccelerator.TORCH_MISSING == "torch is not installed (pip install torch)"


def test_environment_variables_are_those_set_in_the_order_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ("X_VISIBLE_DEVICES", "X_DEVICE_ORDER", "X_UNSET")
    monkeypatch.setenv("X_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("X_VISIBLE_DEVICES", "")
    monkeypatch.delenv("X_UNSET", raising=False)
    assert list(XAccelerator.environment_variables(names).items()) == [
        ("X_VISIBLE_DEVICES", ""),
        ("X_DEVICE_ORDER", "PCI_BUS_ID"),
    ]
    assert XAccelerator.describe_variables(names) == (
        "X_VISIBLE_DEVICES='', X_DEVICE_ORDER='PCI_BUS_ID'"
    )
    environ = {"X_UNSET": "0,1"}  # a mapping of the caller's, not os.environ
    assert XAccelerator.environment_variables(names, environ) == {"X_UNSET": "0,1"}
    assert XAccelerator.describe_variables(names, environ) == "X_UNSET='0,1'"
    assert XAccelerator.describe_variables(["X_NONE"], {}) == ""


def test_once_per_environment_looks_once_per_setting_of_its_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe cache the CUDA and XPU plugins share looks once per setting of its variables.

    None for a variable it does not name, and a fresh look after ``forget()``.
    """
    looks: list[str | None] = []

    def look() -> str:
        looks.append(os.environ.get("X_VISIBLE_DEVICES"))
        return f"look {len(looks)}"

    monkeypatch.delenv("X_VISIBLE_DEVICES", raising=False)
    current = XAccelerator.once_per_environment(["X_VISIBLE_DEVICES"], look)
    assert looks == []  # made lazily
    assert current() == current() == "look 1"
    monkeypatch.setenv("OTHER_VARIABLE", "1")  # not one of its variables: no new look
    assert current() == "look 1"
    monkeypatch.setenv("X_VISIBLE_DEVICES", "0")
    assert current() == "look 2"
    monkeypatch.delenv("X_VISIBLE_DEVICES")
    assert current() == "look 1"  # each setting's answer is kept
    current.forget()
    assert current() == "look 3"
    assert looks == [None, "0", None]


def test_torch_device_in_use_asks_the_device_module_and_never_imports_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert XAccelerator.torch_device_in_use("cuda") is True
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert XAccelerator.torch_device_in_use("cuda") is False
    assert XAccelerator.torch_device_in_use("nosuchdevice") is False  # no torch.nosuchdevice
    monkeypatch.setattr(torch, "xdev", object(), raising=False)  # a module that cannot tell
    assert XAccelerator.torch_device_in_use("xdev") is False
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.delitem(sys.modules, "torch")  # torch not imported in this process
    assert XAccelerator.torch_device_in_use("cuda") is False
    assert "torch" not in sys.modules

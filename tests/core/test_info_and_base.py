"""AcceleratorInfo normalisation and the Accelerator base class's defaults."""

from __future__ import annotations

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

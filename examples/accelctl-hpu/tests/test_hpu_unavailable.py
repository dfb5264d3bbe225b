"""The HPU plugin on a machine without Habana's software: the real unavailable path."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

import accelctl
from accelctl_hpu import HPUAccelerator, visible_modules

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("habana_frameworks") is not None,
    reason="Habana's software is installed here: this file tests its absence",
)


def test_importing_the_plugin_imports_no_torch() -> None:
    code = "import sys, accelctl_hpu; print(json.dumps('torch' in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) is False


def test_not_detected_with_the_reason() -> None:
    hpu = accelctl.get_accelerator("hpu")
    assert hpu.detect() is False
    assert hpu.auto_device_count() == 0
    assert "habana_frameworks is not installed" in (hpu.unavailable_reason() or "")


def test_installed_under_its_entry_point_and_alias() -> None:
    hpu = accelctl.get_accelerator("hpu")
    assert hpu.distribution == "accelctl-hpu"
    assert hpu.entry_point == "accelctl_hpu:HPUAccelerator"
    assert accelctl.get_accelerator("Gaudi").name == "hpu"
    info = hpu.info
    assert (info.priority, info.distributed_backend, info.family) == (200, "hccl", None)


def test_resolve_says_why_it_is_unavailable() -> None:
    with pytest.raises(accelctl.AcceleratorUnavailableError, match="habana_frameworks"):
        accelctl.resolve("hpu")


def test_auto_does_not_choose_an_absent_hpu() -> None:
    assert accelctl.resolve("auto").accelerator.name != "hpu"


def test_device_specs_are_refused_naming_what_is_visible() -> None:
    with pytest.raises(accelctl.DeviceSpecError, match="no hpu device is visible"):
        HPUAccelerator().parse_devices(2)


def test_stats_are_empty_without_habana() -> None:
    import torch

    assert HPUAccelerator().device_stats(torch.device("hpu", 0)) == {}


def test_visible_modules_parsing() -> None:
    assert visible_modules({}) is None
    assert visible_modules({"HABANA_VISIBLE_MODULES": " 0, 3 "}) == [0, 3]
    assert visible_modules({"HABANA_VISIBLE_MODULES": ""}) == []
    with pytest.raises(ValueError, match="HABANA_VISIBLE_MODULES='a,1'"):
        visible_modules({"HABANA_VISIBLE_MODULES": "a,1"})

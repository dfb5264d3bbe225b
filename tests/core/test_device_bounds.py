"""Device specs past any machine are the user's DeviceSpecError, raised at once.

Huge counts, huge strings, bool tensors: never a MemoryError or OverflowError blamed on the plugin.
"""

from __future__ import annotations

import pytest
import torch

from accelctl import (
    DeviceSpecError,
    parse_indexed_devices,
    parse_process_count,
    parse_single_device,
    resolve,
)
from accelctl._contract.device_specs import MAX_DEVICE_COUNT
from accelctl._contract.errors import PluginHookError
from accelctl._host.registry import Registry
from accelctl._host.returns import RETURN_CHECKS

from fakedists import FakeSite

HUGE = [
    10**10,
    2**63,
    100_000_000,
    MAX_DEVICE_COUNT + 1,
    "9" * 5000,  # past int()'s default limit of 4300 digits
    10**5000,  # its repr alone fails the same way
    "1," * (MAX_DEVICE_COUNT + 1),
    [0] * (MAX_DEVICE_COUNT + 1),
    [10**10],
    f"0,{10**10}",
    torch.tensor(10**10),
]


@pytest.fixture
def cpu_only() -> Registry:
    return Registry(environ={"ACCELCTL_PLUGINS": "cpu"})


@pytest.mark.parametrize("spec", HUGE, ids=lambda spec: type(spec).__name__)
def test_resolve_refuses_huge_specs_as_the_users_error(spec: object, cpu_only: Registry) -> None:
    with pytest.raises(DeviceSpecError, match="is too large: accelctl accepts at most 65536") as e:
        resolve("cpu", spec, registry=cpu_only, environ={})
    assert not isinstance(e.value, PluginHookError)
    assert len(str(e.value)) < 500  # the spec is shown shortened


@pytest.mark.parametrize("spec", HUGE, ids=lambda spec: type(spec).__name__)
def test_every_parser_bounds_counts(spec: object) -> None:
    with pytest.raises(DeviceSpecError, match="too large"):
        parse_indexed_devices(spec, visible=8, accelerator="fake")
    with pytest.raises(DeviceSpecError, match="too large"):
        parse_process_count(spec)
    with pytest.raises(DeviceSpecError, match="too large"):
        parse_single_device(spec, accelerator="fake")


def test_the_ceiling_itself_is_accepted() -> None:
    assert parse_process_count(MAX_DEVICE_COUNT) == MAX_DEVICE_COUNT
    assert parse_process_count(str(MAX_DEVICE_COUNT)) == MAX_DEVICE_COUNT
    assert parse_process_count("000002") == 2  # leading zeros are not "too large"


@pytest.mark.parametrize("spec", [torch.tensor(True), torch.tensor(False)])
def test_bool_tensors_are_refused_like_bools(spec: object) -> None:
    for parse in (
        lambda: parse_indexed_devices(spec, visible=2, accelerator="fake"),
        lambda: parse_process_count(spec),
        lambda: parse_indexed_devices([spec], visible=2, accelerator="fake"),
    ):
        with pytest.raises(DeviceSpecError, match=r"is a bool|not a device index"):
            parse()


def test_integer_tensors_still_count() -> None:
    assert parse_process_count(torch.tensor(3)) == 3
    assert parse_indexed_devices([torch.tensor(1)], visible=2, accelerator="fake") == [1]


def test_a_plugin_returning_a_huge_count_is_the_plugins_error() -> None:
    with pytest.raises(TypeError, match=r"at most 65536 devices, indices below 65536"):
        RETURN_CHECKS["parse_devices"](10**10)
    with pytest.raises(TypeError, match=r"at most 65536 devices, indices below 65536"):
        RETURN_CHECKS["parse_devices"]([10**10])
    with pytest.raises(TypeError, match=r"non-negative int \(at most 65536\)"):
        RETURN_CHECKS["auto_device_count"](10**10)
    assert RETURN_CHECKS["parse_devices"]([0, MAX_DEVICE_COUNT - 1]) == [0, MAX_DEVICE_COUNT - 1]


def test_devices_from_the_environment_name_the_variable(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    registry = Registry(path=fake_site.path)
    with pytest.raises(DeviceSpecError) as caught:
        resolve("good", "auto", registry=registry, environ={"ACCELCTL_DEVICES": "7"})
    message = str(caught.value)
    assert message.startswith("ACCELCTL_DEVICES='7' sets what devices=\"auto\" means, and: good:")
    assert "Unset ACCELCTL_DEVICES" in message
    # A spec given directly does not mention the variable.
    with pytest.raises(DeviceSpecError) as caught:
        resolve("good", 7, registry=registry, environ={"ACCELCTL_DEVICES": "1"})
    assert "ACCELCTL_DEVICES" not in str(caught.value)

"""Every public error class is raisable from a message alone, as a vendor's plugin raises it."""

from __future__ import annotations

import pytest

import accelctl
from accelctl.testing import validate

from fakedists import FakeSite

#: Every exception class the public API exports (the lazy ones included).
PUBLIC_ERRORS = sorted(
    name
    for name in accelctl.__all__
    if isinstance(getattr(accelctl, name), type)
    and issubclass(getattr(accelctl, name), BaseException)
)


def test_the_public_errors_are_all_found() -> None:
    assert {"DeviceSpecError", "PluginLoadError", "LaunchFailedError"} <= set(PUBLIC_ERRORS)


@pytest.mark.parametrize("name", PUBLIC_ERRORS)
def test_each_public_error_takes_a_message_alone(name: str) -> None:
    error_class = getattr(accelctl, name)
    with pytest.raises(error_class) as info:
        raise error_class("npu: devices=5 asks for more than the 4 visible")
    assert str(info.value) == "npu: devices=5 asks for more than the 4 visible"


def test_structured_parts_are_optional_attributes() -> None:
    error = accelctl.DeviceSpecError("bad")
    assert (error.accelerator, error.spec, error.visible) == (None, None, None)
    assert isinstance(error, ValueError)
    assert accelctl.PluginHookError("broke").hook is None
    assert accelctl.PluginConflictError("twice").distributions == ()
    assert accelctl.UnknownAcceleratorError("who").installed == ()
    assert accelctl.LaunchFailedError("rank 1 died").exit_code == 1


@pytest.fixture
def vendor_site(fake_site: FakeSite) -> FakeSite:
    """A vendor whose own parser raises DeviceSpecError from a message alone."""
    fake_site.install("accelctl-vend", {"vend": "fakeplugins.own_parser:OwnParserAccelerator"})
    return fake_site


def test_a_vendors_message_only_spec_error_reaches_the_user_with_its_parts_filled(
    vendor_site: FakeSite,
) -> None:
    registry = accelctl.testing.Registry(path=vendor_site.path)
    with pytest.raises(accelctl.DeviceSpecError) as info:
        accelctl.resolve("vend", devices=5, registry=registry)
    assert str(info.value).startswith("vend: devices=5 is not 'auto'")
    assert (info.value.accelerator, info.value.spec) == ("vend", 5)
    assert not isinstance(info.value, accelctl.PluginHookError)  # not blamed on the plugin


def test_validate_passes_a_vendor_that_raises_spec_errors_from_a_message(
    vendor_site: FakeSite,
) -> None:
    registry = accelctl.testing.Registry(path=vendor_site.path)
    report = validate("vend", registry=registry, probe_import=False)
    assert report.result("bad_device_specs").status == "pass", report.result("bad_device_specs")
    assert report.passed, report.failures

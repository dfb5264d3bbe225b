"""The ``device_stats`` conformance check calls the hook with both forms of a device.

The ``torch.device`` the Trainer passes and the string ``accelctl stats`` passes without torch.
"""

from __future__ import annotations

import accelctl
from accelctl.testing import ValidationReport, validate

from fakedists import FakeSite


def run(site: FakeSite, name: str) -> ValidationReport:
    return validate(name, registry=accelctl.testing.Registry(path=site.path), probe_import=False)


def stats_result(site: FakeSite, name: str, plugin: str) -> tuple[str, str]:
    """Install ``name`` as the class ``plugin`` of ``fakeplugins``; its device_stats check."""
    site.install(f"accelctl-{name}", {name: f"fakeplugins.{plugin}"})
    result = run(site, name).result("device_stats")
    return result.status, result.detail


def test_a_plugin_that_takes_only_torch_devices_fails_on_the_string(fake_site: FakeSite) -> None:
    status, detail = stats_result(fake_site, "onlytorch", "figures:TorchDevicesOnly")
    assert status == "fail"
    assert detail == (
        "'cpu' (a str): hook device_stats() raised AttributeError: "
        "'str' object has no attribute 'type'"
    )


def test_both_forms_must_give_the_same_keys(fake_site: FakeSite) -> None:
    status, detail = stats_result(fake_site, "uneven", "figures:UnevenStats")
    assert (status, detail) == (
        "fail",
        "torch.device('cpu') and the str 'cpu' give different keys: memory_used_bytes; both "
        "forms name the same device",
    )


def test_a_device_type_other_than_the_name_is_a_note_naming_the_fix(fake_site: FakeSite) -> None:
    status, detail = stats_result(fake_site, "standin", "good:GoodAccelerator")
    assert status == "pass"
    assert detail.endswith(
        "; note: accelctl stats (without torch) asks for 'standin' devices, not 'cpu': set "
        "AcceleratorInfo(device_type='cpu')"
    )
    status, detail = stats_result(fake_site, "typed", "figures:CpuTyped")
    assert status == "pass" and "note" not in detail

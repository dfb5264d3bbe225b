"""The ``device_stats`` conformance check calls the hook with both forms of a device: the
``torch.device`` the Trainer passes and the string ``accelctl stats`` passes without torch."""

from __future__ import annotations

import accelctl
from accelctl.testing import ValidationReport, validate

from fakedists import FakeSite, good_plugin


def run(site: FakeSite, name: str) -> ValidationReport:
    return validate(name, registry=accelctl.testing.Registry(path=site.path), probe_import=False)


def stats_result(site: FakeSite, name: str, source: str) -> tuple[str, str]:
    site.install(f"accelctl-{name}", {name: f"{name}_mod"}, {f"{name}_mod": source})
    result = run(site, name).result("device_stats")
    return result.status, result.detail


def test_a_plugin_that_takes_only_torch_devices_fails_on_the_string(fake_site: FakeSite) -> None:
    source = good_plugin("onlytorch").replace(
        'return {"memory_used_bytes": 1}', 'return {"memory_used_bytes": len(device.type)}'
    )
    status, detail = stats_result(fake_site, "onlytorch", source)
    assert status == "fail"
    assert detail == (
        "'cpu' (a str): hook device_stats() raised AttributeError: "
        "'str' object has no attribute 'type'"
    )


def test_both_forms_must_give_the_same_keys(fake_site: FakeSite) -> None:
    source = good_plugin("uneven").replace(
        'return {"memory_used_bytes": 1}',
        'return {"memory_used_bytes": 1} if isinstance(device, str) else {}',
    )
    status, detail = stats_result(fake_site, "uneven", source)
    assert (status, detail) == (
        "fail",
        "torch.device('cpu') and the str 'cpu' give different keys: memory_used_bytes; both "
        "forms name the same device",
    )


def test_a_device_type_other_than_the_name_is_a_note_naming_the_fix(fake_site: FakeSite) -> None:
    status, detail = stats_result(fake_site, "standin", good_plugin("standin"))
    assert status == "pass"
    assert detail.endswith(
        "; note: accelctl stats (without torch) asks for 'standin' devices, not 'cpu': set "
        "AcceleratorInfo(device_type='cpu')"
    )
    typed = good_plugin("typed").replace('"aliases": ()', '"aliases": (), "device_type": "cpu"')
    status, detail = stats_result(fake_site, "typed", typed)
    assert status == "pass" and "note" not in detail

"""The conformance checks ask the registry to load a plugin and read from its record how far
loading got: the plugin's code runs once, as the registry ran it, never a second time."""

from __future__ import annotations

import sys

import pytest

from accelctl.testing import Registry, validate

from fakedists import FakeSite

#: A class plugin that counts its instantiations; ``FAIL`` makes __init__ raise, ``TYPO``
#: misspells a required hook so that registering it fails.
COUNTED = """
    import accelctl

    CALLS = []

    class Counted:
        def __init__(self):
            CALLS.append(1)
            if {fail}:
                raise RuntimeError("no device library")

        @accelctl.hookimpl
        def {detect}(self):
            return False

        @accelctl.hookimpl
        def auto_device_count(self):
            return 0

        @accelctl.hookimpl
        def parse_devices(self, devices):
            return accelctl.parse_indexed_devices(devices, visible=0, accelerator="counted")

        @accelctl.hookimpl
        def get_parallel_devices(self, devices):
            return []

        @accelctl.hookimpl
        def device_stats(self, device):
            return {{}}
"""


@pytest.mark.parametrize(
    ("fail", "detect", "stage", "check", "detail"),
    [
        (True, "detect", "instantiate", "loads", "no device library"),
        (False, "detcet", "register", "hooks_match_specs", "detcet"),
    ],
)
def test_checks_report_the_records_stage_without_running_the_plugin_again(
    fake_site: FakeSite, fail: bool, detect: str, stage: str, check: str, detail: str
) -> None:
    module = f"rec_counted_{stage}"
    fake_site.install(
        "acme-counted",
        {"counted": f"{module}:Counted"},
        {module: COUNTED.format(fail=fail, detect=detect)},
    )
    registry = Registry(path=fake_site.path, environ={})
    report = validate("counted", registry=registry, probe_import=False)
    assert registry.claimants("counted")[0].stage == stage
    result = report.result(check)
    assert result.status == "fail" and detail in result.detail
    assert len(sys.modules[module].CALLS) == 1  # instantiated by the registry alone

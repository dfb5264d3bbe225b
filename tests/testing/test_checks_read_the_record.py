"""The conformance checks read how far loading got from the registry's record; code runs once.

The checks ask the registry to load a plugin; the plugin's code runs as the registry ran it, never a
second time.
"""

from __future__ import annotations

import sys

import pytest

from accelctl.testing import Registry, validate

from fakedists import FakeSite


@pytest.mark.parametrize(
    ("plugin", "stage", "check", "detail"),
    [
        ("CountedFailing", "instantiate", "loads", "no device library"),
        ("CountedMisnamed", "register", "hooks_match_specs", "detcet"),
    ],
)
def test_checks_report_the_records_stage_without_running_the_plugin_again(
    fake_site: FakeSite, plugin: str, stage: str, check: str, detail: str
) -> None:
    # A class plugin that counts its instantiations (fakeplugins.classy.MADE).
    fake_site.install("acme-counted", {"counted": f"fakeplugins.classy:{plugin}"})
    registry = Registry(path=fake_site.path, environ={})
    report = validate("counted", registry=registry, probe_import=False)
    assert registry.claimants("counted")[0].stage == stage
    result = report.result(check)
    assert result.status == "fail" and detail in result.detail
    assert len(sys.modules["fakeplugins.classy"].MADE) == 1  # instantiated by the registry alone

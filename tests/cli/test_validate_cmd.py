"""``accelctl validate``: exit codes, JSON and the reasons, through click's CliRunner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import Result
from cliharness import Cli

from accelctl.testing import CHECK_IDS

from fakedists import FakeSite


def as_json(result: Result) -> list[dict[str, Any]]:
    data = json.loads(result.stdout)
    assert isinstance(data, list)
    return data


@pytest.fixture
def site(fake_site: FakeSite) -> FakeSite:
    """Install ``good``, ``npu`` (hardware absent), ``broken`` (fails to import), ``raiser``.

    ``raiser``'s detect() raises.
    """
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    fake_site.install("acme-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    fake_site.install("acme-broken", {"broken": "fakeplugins.lacks_runtime"})
    fake_site.install("acme-raiser", {"raiser": "fakeplugins.hostile:DetectRaises"})
    return fake_site


def test_json_shape_for_a_passing_plugin(cli: Cli, site: FakeSite) -> None:
    result = cli("validate", "good", "--json")
    assert result.exit_code == 0, result.output
    [report] = as_json(result)
    assert {"name", "passed", "checks"} <= set(report)
    assert (report["name"], report["passed"], report["distribution"]) == ("good", True, "acme-good")
    assert [check["check"] for check in report["checks"]] == list(CHECK_IDS)
    for check in report["checks"]:
        assert set(check) == {"check", "status", "detail"}
        assert check["status"] in ("pass", "skip") and check["detail"]


def test_absent_hardware_passes_and_says_why_checks_skipped(cli: Cli, site: FakeSite) -> None:
    result = cli("validate", "npu", "--json")
    assert result.exit_code == 0, result.output
    checks = {c["check"]: c for c in as_json(result)[0]["checks"]}
    assert checks["devices_auto"]["status"] == "skip"
    assert checks["devices_auto"]["detail"].endswith("no npu hardware here")


def test_broken_import_exits_1_with_the_cause_and_no_traceback(cli: Cli, site: FakeSite) -> None:
    result = cli("validate", "broken")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.stdout.startswith("broken (acme-broken 1.0): FAILED (1 failed, 18 skipped)\n")
    line = next(li for li in result.stdout.splitlines() if li.strip().startswith("FAIL"))
    assert "loads" in line
    assert (
        "importing 'fakeplugins.lacks_runtime' failed: ModuleNotFoundError: No module named "
        "'vendor_runtime_that_is_missing'"
    ) in line
    assert "SKIP  18 checks, import_is_light to distributed_backend: the plugin did not load" in (
        result.stdout
    )
    assert result.stdout.rstrip().endswith("1 accelerator(s) validated, failed: broken")


def test_raising_hook_fails_its_check_with_the_reason(cli: Cli, site: FakeSite) -> None:
    result = cli("validate", "raiser", "--json")
    assert result.exit_code == 1
    [report] = as_json(result)
    assert report["passed"] is False
    failed = {c["check"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
    assert failed == {"detect_returns_bool": "hook detect() raised RuntimeError: driver exploded"}


def test_debug_prints_the_plugins_traceback(cli: Cli, site: FakeSite) -> None:
    result = cli("--debug", "validate", "raiser")
    assert result.exit_code == 1
    assert "--- raiser: detect_returns_bool ---" in result.stderr
    assert 'raise RuntimeError("driver exploded")' in result.stderr


def test_default_validates_every_enabled_plugin_and_skips_disabled_ones(
    cli: Cli, site: FakeSite
) -> None:
    result = cli("validate", "--json", env={"ACCELCTL_PLUGINS": "good,npu,broken"})
    assert result.exit_code == 1  # broken fails
    reports = {report["name"]: report for report in as_json(result)}
    assert {"good", "npu", "broken", "raiser", "cpu"} <= set(reports)
    assert (reports["good"]["passed"], reports["npu"]["passed"]) == (True, True)
    assert reports["broken"]["passed"] is False
    raiser = reports["raiser"]  # disabled: not imported, every check skipped with the variable
    assert raiser["passed"] is None
    assert raiser["disabled"] == "disabled: ACCELCTL_PLUGINS=broken,good,npu does not list it"
    assert {c["status"] for c in raiser["checks"]} == {"skip"}
    assert raiser["checks"][0]["detail"] == (
        "disabled: ACCELCTL_PLUGINS=broken,good,npu does not list it; not imported"
    )


def test_only_passing_plugins_exit_0(cli: Cli, site: FakeSite) -> None:
    result = cli("validate", "good", "npu")
    assert result.exit_code == 0
    assert result.stdout.rstrip().endswith("2 accelerator(s) validated, all passed")
    assert "good (acme-good 1.0): passed (17 passed, 2 skipped)" in result.stdout


def test_unknown_name_fails_with_the_nearest_name(cli: Cli, site: FakeSite) -> None:
    result = cli("validate", "goood", "--json")
    assert result.exit_code == 1
    [report] = as_json(result)
    loads = report["checks"][0]
    assert loads["status"] == "fail"
    assert "no accelerator named 'goood' is installed" in loads["detail"]
    assert "Did you mean 'good'?" in loads["detail"]


def test_the_plugins_installed_here_pass(cli: Cli) -> None:
    """cpu, the hpu example and, once installed, cuda and mps: all pass on this machine."""
    result = cli("validate", "--json")
    reports = {report["name"]: report for report in as_json(result)}
    assert {"cpu", "hpu"} <= set(reports)
    assert result.exit_code == 0, [r for r in reports.values() if not r["passed"]]

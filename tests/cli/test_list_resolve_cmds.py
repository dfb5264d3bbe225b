"""``accelctl list`` and ``accelctl resolve`` through click's CliRunner, parsing --json."""

from __future__ import annotations

import json
import sys

import pytest
from cliharness import Cli

from fakedists import FakeSite

LIST_FIELDS = {
    "name",
    "distribution",
    "version",
    "entry_point",
    "family",
    "priority",
    "description",
    "available",
    "device_count",
    "reason",
    "error",
}


@pytest.fixture
def site(fake_site: FakeSite) -> FakeSite:
    """``good`` (priority 10), ``npu`` (its hardware absent), ``broken`` (fails to import)."""
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    fake_site.install("acme-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    fake_site.install("acme-broken", {"broken": "fakeplugins.lacks_runtime"})
    return fake_site


def test_list_json_rows(cli: Cli, site: FakeSite) -> None:
    result = cli("list", "--json", env={"ACCELCTL_DISABLE": "gone"})
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert all(LIST_FIELDS <= set(row) for row in rows.values())
    assert rows["cpu"]["available"] is True and rows["cpu"]["device_count"] == 1
    assert rows["cpu"]["distribution"] == "accelctl-cpu" and rows["cpu"]["priority"] == 0
    assert rows["good"] | {} == rows["good"] and rows["good"]["device_count"] == 2
    assert rows["npu"]["available"] is False and rows["npu"]["device_count"] == 0
    assert rows["npu"]["reason"] == "no npu hardware here" and rows["npu"]["error"] is None
    broken = rows["broken"]
    assert broken["available"] is None and broken["device_count"] is None
    assert "No module named 'vendor_runtime_that_is_missing'" in broken["error"]


def test_list_disabled_rows_name_the_variable(cli: Cli, site: FakeSite) -> None:
    result = cli("list", "--json", env={"ACCELCTL_DISABLE": "broken,npu"})
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["broken"]["available"] is None and rows["broken"]["error"] is None
    assert rows["broken"]["reason"] == "disabled by ACCELCTL_DISABLE"
    assert rows["npu"]["reason"] == "disabled by ACCELCTL_DISABLE"
    assert "fakeplugins.lacks_runtime" not in sys.modules
    assert "fakeplugins.undetected" not in sys.modules


def test_list_no_detect_runs_no_plugin_code(cli: Cli, site: FakeSite) -> None:
    result = cli("list", "--json", "--no-detect")
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["good"]["available"] is None and rows["good"]["version"] == "1.0"
    assert not [module for module in sys.modules if module.startswith("fakeplugins")]


def test_list_table_for_people(cli: Cli, site: FakeSite) -> None:
    result = cli("list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header = lines[0].split()
    assert header == ["NAME", "AVAILABLE", "DEVICES", "FAMILY", "PRIORITY", "PLUGIN", "DESCRIPTION"]
    rows = {line.split()[0]: line for line in lines[1:] if line and ":" not in line.split()[0]}
    assert rows["good"].split()[1:3] == ["yes", "2"]
    assert rows["npu"].split()[1:3] == ["no", "0"]
    assert rows["broken"].split()[1:3] == ["broken", "-"]
    # Columns line up: each column starts at the same offset on every row.
    offset = lines[0].index("PLUGIN")
    assert rows["good"][offset:].startswith("acme-good 1.0")
    assert "npu: no npu hardware here" in result.stdout
    assert "broken: error: accelerator 'broken' (acme-broken 1.0): importing" in result.stdout


def test_resolve_json(cli: Cli, site: FakeSite) -> None:
    result = cli("resolve", "--accelerator", "good", "--devices", "1,", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["accelerator"] == "good" and data["devices"] == ["cpu"]
    assert data["distributed_backend"] == "gloo"


def test_resolve_auto_and_env(cli: Cli, site: FakeSite) -> None:
    data = json.loads(cli("resolve", "--json").stdout)
    assert data["accelerator"] == "good"  # priority 10 beats cpu's 0
    data = json.loads(cli("resolve", "--json", env={"ACCELCTL_ACCELERATOR": "cpu"}).stdout)
    assert data["accelerator"] == "cpu" and data["devices"] == ["cpu"]


def test_resolve_human(cli: Cli, site: FakeSite) -> None:
    result = cli("resolve", "-a", "cpu", "-d", "2")
    assert result.exit_code == 0
    assert "accelerator:         cpu (accelctl-cpu 0.1.0)" in result.stdout
    assert "devices:             cpu, cpu" in result.stdout
    assert "distributed backend: gloo" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-a", "nope"], "error: no accelerator named 'nope' is installed"),
        (
            ["-a", "npu"],
            "error: accelerator 'npu' is installed but not available here: no npu hardware",
        ),
        (
            ["-a", "broken"],
            "error: accelerator 'broken' (acme-broken 1.0): importing 'fakeplugins.lacks_runtime'",
        ),
        (["-a", "cpu", "-d", "0,1"], "error: cpu: --devices 0,1 lists device indices"),
        (["-a", "good", "-d", "abc"], 'error: good: --devices abc is not "auto", a number'),
        (["-a", "gpu"], "error: --accelerator gpu found no available gpu-family accelerator"),
    ],
)
def test_resolve_errors_are_one_line_exit_1(
    cli: Cli, site: FakeSite, args: list[str], message: str
) -> None:
    result = cli("resolve", *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    *warnings, error = result.stderr.strip().splitlines()
    assert error.startswith(message), result.stderr
    assert all(line.startswith("warning: skipping accelerator 'broken'") for line in warnings)
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(cli: Cli, site: FakeSite) -> None:
    result = cli("--debug", "resolve", "-a", "nope")
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "UnknownAcceleratorError" in result.stderr


def test_auto_warns_about_broken_plugins_on_stderr(cli: Cli, site: FakeSite) -> None:
    result = cli("resolve", "--json")
    assert result.exit_code == 0
    assert "warning: skipping accelerator 'broken' (acme-broken 1.0)" in result.stderr
    json.loads(result.stdout)  # stdout stays pure JSON


@pytest.mark.parametrize("args", [["list", "--bogus"], ["resolve", "--devices"], ["nosuchcommand"]])
def test_usage_errors_exit_2(cli: Cli, args: list[str]) -> None:
    assert cli(*args).exit_code == 2


def test_version(cli: Cli) -> None:
    result = cli("--version")
    assert result.exit_code == 0 and result.stdout.startswith("accelctl, version ")

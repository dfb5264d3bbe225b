"""``accelctl stats`` through click's CliRunner, parsing --json.

Fake installed plugins stand in for accelerators with hardware figures.
"""

from __future__ import annotations

import json

import pytest
from cliharness import Cli, FakeClock

from accelctl._readings import stats as _stats
from accelctl.cli import _child, stats_cmd

from fakedists import FakeSite


@pytest.fixture
def gpu_site(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> FakeSite:
    """``fakegpu`` (two devices, device 1's sensor offline) and ``broken`` (fails to import)."""
    fake_site.install("acme-fakegpu", {"fakegpu": "fakeplugins.figures:SensorGpu"})
    fake_site.install("acme-broken", {"broken": "fakeplugins.lacks_runtime"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,fakegpu,broken")
    return fake_site


def test_json_has_every_available_device_and_no_unavailable_one(cli: Cli, monkeypatch):
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,cuda,mps")
    result = cli("stats", "--json")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert [(e["accelerator"], e["device"], e["error"]) for e in entries] == [("cpu", "cpu", None)]
    stats = entries[0]["stats"]
    assert stats["memory_total_bytes"] > 0
    assert set(stats) == {
        "utilization_percent",
        "cpu_percent",
        "memory_used_bytes",
        "memory_total_bytes",
        "swap_percent",
    }


def test_name_unknown_or_unavailable_is_one_line_and_exit_1(cli: Cli, monkeypatch):
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,mps")
    result = cli("stats", "mps")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: accelerator 'mps' is installed but not available here: "
    )
    result = cli("stats", "nope", "--json")
    assert result.exit_code == 1 and result.stdout == ""
    assert "no accelerator named 'nope' is installed" in result.stderr
    assert "Traceback" not in result.output


def test_a_failing_device_and_a_broken_plugin_are_reported_and_exit_1(cli: Cli, gpu_site):
    result = cli("stats", "--json")
    assert result.exit_code == 1
    entries = {(e["accelerator"], e["device"]): e for e in json.loads(result.stdout)}
    assert set(entries) == {("cpu", "cpu"), ("fakegpu", "meta:0"), ("fakegpu", "meta:1"),
                            ("broken", "?")}  # fmt: skip
    assert entries[("fakegpu", "meta:0")]["stats"]["fakegpu.fan_rpm"] == 1200
    failed = entries[("fakegpu", "meta:1")]
    assert failed["stats"] == {} and "sensor offline" in failed["error"]
    # Issue 26: the broken plugin is its row (as `stats broken` is its error), not a warning.
    broken = entries[("broken", "?")]
    assert broken["stats"] == {} and "vendor_runtime_that_is_missing" in broken["error"]
    assert "warning" not in result.stderr


def test_one_name_and_the_human_table(cli: Cli, gpu_site):
    result = cli("stats", "fakegpu")
    assert result.exit_code == 1  # device 1's sensor fails
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "ACCELERATOR",
        "DEVICE",
        "MEMORY",
        "USED/TOTAL",
        "ALLOCATED",
        "UTIL",
        "TEMP",
        "POWER",
    ]
    assert lines[1].split() == [
        "fakegpu",
        "meta:0",
        "1.0",
        "GiB",
        "/",
        "2.0",
        "GiB",
        "512.0",
        "MiB",
        "50%",
        "61",
        "C",
        "99.5",
        "W",
    ]
    assert "meta:0: fakegpu.fan_rpm=1200" in result.stdout
    assert "meta:1 (fakegpu): error: " in result.stdout and "sensor offline" in result.stdout
    assert "cpu" not in result.stdout.split()


def test_cpu_alone_exits_0(cli: Cli, gpu_site):
    result = cli("stats", "cpu", "--json")
    assert result.exit_code == 0
    assert [e["accelerator"] for e in json.loads(result.stdout)] == ["cpu"]


def test_watch_refreshes_until_ctrl_c_and_exits_0(cli: Cli, monkeypatch):
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu")
    monkeypatch.setattr(_child, "FORK", False)  # the clock below is this process's
    clock = FakeClock()
    sleeps = clock.sleeps

    def sleep(seconds: float) -> None:
        if len(sleeps) == 4:  # the pause after the reading thrown away, then three
            raise KeyboardInterrupt

    clock.on_sleep = sleep
    monkeypatch.setattr(stats_cmd, "time", clock)  # the --watch interval
    monkeypatch.setattr(_stats, "time", clock)  # the wait for a real first reading
    result = cli("stats", "--json", "--watch", "0.5")
    assert result.exit_code == 0
    documents = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(documents) == 3 and sleeps == [_stats.FIRST_READING_WAIT_S, 0.5, 0.5, 0.5]
    assert all(doc[0]["accelerator"] == "cpu" for doc in documents)
    sleeps.clear()
    result = cli("stats", "--watch", "2")
    assert result.exit_code == 0
    assert result.stdout.count("every 2s, Ctrl-C to stop") == 3


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_watch_needs_a_positive_number(cli: Cli, value: str):
    result = cli("stats", "--watch", value)
    assert result.exit_code == 2
    assert "--watch" in result.stderr


@pytest.mark.parametrize(
    ("plugin", "devices"),
    [
        ("TwoIndices", ["procs:0", "procs:2"]),  # indices: "<name>:<i>"
        ("ProcessCount", ["procs"]),  # a process count: the one device they share
        ("OpenregIndex", ["openreg:1"]),  # torch's type, not the name
    ],
)
def test_devices_are_strings_built_from_parse_devices(
    cli: Cli,
    fake_site: FakeSite,
    monkeypatch: pytest.MonkeyPatch,
    plugin: str,
    devices: list[str],
) -> None:
    fake_site.install("acme-procs", {"procs": f"fakeplugins.figures:{plugin}"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "procs")
    result = cli("stats", "--json")
    assert result.exit_code == 0, result.output
    assert [entry["device"] for entry in json.loads(result.stdout)] == devices

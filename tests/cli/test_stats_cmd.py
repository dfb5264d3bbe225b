"""``accelctl stats`` through click's CliRunner, parsing --json; fake installed plugins stand in
for accelerators with hardware figures."""

from __future__ import annotations

import json

import pytest
from cliharness import Cli, FakeClock

from accelctl import _stats
from accelctl.cli import stats_cmd

from fakedists import FakeSite

GPU_PLUGIN = """
import accelctl

@accelctl.hookimpl
def detect():
    return True

@accelctl.hookimpl
def auto_device_count():
    return 2

@accelctl.hookimpl
def parse_devices(devices):
    return accelctl.parse_indexed_devices(devices, visible=2, accelerator="fakegpu")

@accelctl.hookimpl
def get_parallel_devices(devices):
    import torch
    return [torch.device("meta", i) for i in devices]

@accelctl.hookimpl
def device_stats(device):
    if accelctl.split_device(device) == ("meta", 1):  # a str from `accelctl stats`
        raise RuntimeError("sensor offline")
    return {"memory_used_bytes": 1 << 30, "memory_total_bytes": 2 << 30,
            "memory_allocated_bytes": 512 << 20, "utilization_percent": 50.0,
            "temperature_celsius": 61.0, "power_watts": 99.5, "fakegpu.fan_rpm": 1200}

@accelctl.hookimpl
def accelerator_info():
    return {"family": "gpu", "priority": 100, "device_type": "meta"}
"""


@pytest.fixture
def gpu_site(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> FakeSite:
    fake_site.install("acme-fakegpu", {"fakegpu": "stats_fakegpu"}, {"stats_fakegpu": GPU_PLUGIN})
    fake_site.install("acme-broken", {"broken": "stats_broken"}, {"stats_broken": "import nope_x"})
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
    assert set(stats) == {"cpu_percent", "memory_used_bytes", "memory_total_bytes", "swap_percent"}


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
    assert broken["stats"] == {} and "nope_x" in broken["error"]
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


COUNTING_PLUGIN = """
import accelctl

@accelctl.hookimpl
def detect():
    return True

@accelctl.hookimpl
def auto_device_count():
    return 3

@accelctl.hookimpl
def parse_devices(devices):
    return {parsed}

@accelctl.hookimpl
def get_parallel_devices(devices):
    raise AssertionError("accelctl stats must not need torch.device objects")

@accelctl.hookimpl
def device_stats(device):
    assert isinstance(device, str)
    return {{"memory_used_bytes": 1}}

@accelctl.hookimpl
def accelerator_info():
    return {info}
"""


@pytest.mark.parametrize(
    ("parsed", "info", "devices"),
    [
        ("[0, 2]", "{}", ["procs:0", "procs:2"]),  # indices: "<name>:<i>"
        ("3", "{}", ["procs"]),  # a process count: the one device they share
        ("[1]", '{"device_type": "openreg"}', ["openreg:1"]),  # torch's type, not the name
    ],
)
def test_devices_are_strings_built_from_parse_devices(
    cli: Cli,
    fake_site: FakeSite,
    monkeypatch: pytest.MonkeyPatch,
    parsed: str,
    info: str,
    devices: list[str],
) -> None:
    source = COUNTING_PLUGIN.format(parsed=parsed, info=info)
    fake_site.install("acme-procs", {"procs": "stats_procs"}, {"stats_procs": source})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "procs")
    result = cli("stats", "--json")
    assert result.exit_code == 0, result.output
    assert [entry["device"] for entry in json.loads(result.stdout)] == devices

"""accelctl.exporters.prometheus and ``accelctl stats --prometheus``, tested by scraping them.

An HTTP GET of ``/metrics`` (urllib), parsed by prometheus-client's own parser. Fake installed
plugins have known figures (``fakeplugins.figures``), a failing sensor, a failed import and a hook
that never answers.
"""

from __future__ import annotations

import importlib
import math
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from types import ModuleType

import pytest
from cliharness import Cli
from prometheus_client.parser import text_string_to_metric_families

import accelctl
from accelctl.exporters import prometheus

from fakedists import FakeSite

#: Hang guards: far above what a scrape or the command takes, even on a loaded machine.
SCRAPE_GUARD_S = 60
PROCESS_GUARD_S = 120

#: SensorGpu's device 0 (tests/fixtures/fakeplugins/figures.py), as metrics.
KNOWN = {
    "accelctl_memory_used_bytes": float(1 << 30),
    "accelctl_memory_total_bytes": float(2 << 30),
    "accelctl_memory_allocated_bytes": float(512 << 20),
    "accelctl_utilization_ratio": 0.5,
    "accelctl_temperature_celsius": 61.0,
    "accelctl_power_watts": 99.5,
    "accelctl_fakegpu_fan_rpm": 1200.0,
}


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The samples at ``url``: name -> (sorted labels) -> value; also checks each family's type."""
    with urllib.request.urlopen(url, timeout=SCRAPE_GUARD_S) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        expected = "counter" if family.name == "accelctl_read_errors" else "gauge"
        assert family.type == expected, family.name
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def on(accelerator: str, device: str) -> tuple[tuple[str, str], ...]:
    return (("accelerator", accelerator), ("device", device))


@pytest.fixture
def gpu_site(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> FakeSite:
    """``fakegpu`` (two devices, device 1's sensor offline) and ``broken`` (fails to import)."""
    fake_site.install("acme-fakegpu", {"fakegpu": "fakeplugins.figures:SensorGpu"})
    fake_site.install("acme-broken", {"broken": "fakeplugins.lacks_runtime"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "fakegpu,broken")
    return fake_site


@pytest.mark.parametrize(
    ("key", "name", "unit", "scale"),
    [
        ("memory_used_bytes", "accelctl_memory_used_bytes", "bytes", 1.0),
        ("utilization_percent", "accelctl_utilization_ratio", "ratio", 0.01),
        ("power_watts", "accelctl_power_watts", "watts", 1.0),
        ("temperature_celsius", "accelctl_temperature_celsius", "celsius", 1.0),
        ("cuda.sm_clock_hz", "accelctl_cuda_sm_clock_hertz", "hertz", 1.0),
        ("flops_per_second", "accelctl_flops_per_second", "", 1.0),
        ("mps.recommended_max_memory_bytes", "accelctl_mps_recommended_max_memory_bytes",
         "bytes", 1.0),
        ("acme-npu.fan_rpm", "accelctl_acme_npu_fan_rpm", "", 1.0),  # no unit: as it is
        ("_bytes", "accelctl__bytes", "", 1.0),  # a suffix alone is a name, not a unit
    ],
)  # fmt: skip
def test_each_key_is_a_metric_named_and_scaled_by_its_suffix(
    key: str, name: str, unit: str, scale: float
) -> None:
    assert prometheus.metric_name(key) == prometheus.MetricName(name, unit, scale)


def test_a_scrape_has_the_plugins_figures_and_the_devices_that_failed(gpu_site: FakeSite) -> None:
    with prometheus.serve(0, address="127.0.0.1", interval=3600) as exporter:
        assert exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"
        samples = scrape(exporter.url)
    for name, value in KNOWN.items():
        assert samples[name] == {on("fakegpu", "meta:0"): value}, name
    up = samples["accelctl_device_up"]
    assert up == {on("fakegpu", "meta:0"): 1, on("fakegpu", "meta:1"): 0, on("broken", "?"): 0}
    # Read once (the round thrown away is not served): one failure each, none for meta:0.
    errors = samples["accelctl_read_errors_total"]
    assert errors == {on("fakegpu", "meta:0"): 0, on("fakegpu", "meta:1"): 1, on("broken", "?"): 1}
    [stamp] = samples["accelctl_last_read_timestamp_seconds"].values()
    assert stamp > 0


def test_rounds_are_read_every_interval_and_failures_add_up(
    gpu_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_PLUGINS", "fakegpu")
    done = threading.Event()
    rounds: list[int] = []
    with prometheus.serve(0, address="127.0.0.1", interval=0.1) as exporter:
        update = exporter.collector.update

        def counted(readings: list[accelctl.DeviceStats], read_at: float | None = None) -> None:
            update(readings, read_at)
            rounds.append(len(readings))
            if len(rounds) == 3:
                done.set()

        monkeypatch.setattr(exporter.collector, "update", counted)
        assert done.wait(SCRAPE_GUARD_S)
        samples = scrape(exporter.url)
    errors = samples["accelctl_read_errors_total"][on("fakegpu", "meta:1")]
    assert errors >= 4  # the first round, then 3 or more by the reader
    assert rounds[:3] == [2, 2, 2]


@pytest.fixture
def gate(fake_site: FakeSite) -> Iterator[ModuleType]:
    """``fakeplugins.gate``, whose waiting hooks go on when the test ends."""
    module = importlib.import_module("fakeplugins.gate")
    yield module
    module.OPEN.set()


def test_a_hung_plugin_never_holds_up_a_scrape_and_shows_as_down(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The plugin answers the first round (its reading thrown away and the one returned, two
    # devices each), then never again: scrapes answer with the round they have; after the
    # deadline its devices are down.
    fake_site.install("acme-hung", {"hung": "fakeplugins.waiting:WaitsInDeviceStats"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "hung")
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "1")  # only the hung plugin is asked
    calls: list[int] = []
    stuck = threading.Event()

    def wait() -> object:
        calls.append(1)
        if len(calls) <= 4:
            return True
        stuck.set()
        return gate.OPEN.wait()

    monkeypatch.setattr(gate, "wait", wait)
    with prometheus.serve(0, address="127.0.0.1", interval=0.1) as exporter:
        assert stuck.wait(SCRAPE_GUARD_S)  # the reader is inside the hung hook now
        while_stuck = scrape(exporter.url)  # answers from the round before
        assert while_stuck["accelctl_memory_used_bytes"][on("hung", "hung:0")] == 1
        down: dict[tuple[tuple[str, str], ...], float] = {}
        for _ in range(int(SCRAPE_GUARD_S / 0.1)):  # the deadline passes; a hang guard
            down = scrape(exporter.url)["accelctl_device_up"]
            if down.get(on("hung", "hung:0")) == 0:
                break
            threading.Event().wait(0.1)
        assert down[on("hung", "hung:0")] == 0
        assert down[on("hung", "hung:1")] == 0  # each device it had, not a device "?"
        [first, second] = exporter.readings
        assert (first.device, second.device) == ("hung:0", "hung:1")
        assert first.error is not None and "did not answer within 1 s" in first.error


def test_a_key_another_key_has_the_name_of_is_warned_about_and_left_out() -> None:
    collector = prometheus.DeviceStatsCollector()
    reading = accelctl.DeviceStats("acme", "acme:0", {"acme.x_bytes": 1, "acme_x_bytes": 2})
    collector.update([reading], read_at=10.0)
    with pytest.warns(accelctl.PluginWarning, match="'acme_x_bytes' is not exported"):
        families = {family.name: family for family in collector.collect()}
    [sample] = families["accelctl_acme_x_bytes"].samples
    assert sample.value == 1  # the first key in order keeps the name
    assert families["accelctl_last_read_timestamp_seconds"].samples[0].value == 10.0


def test_non_numbers_and_non_finite_figures_are_nan_and_inf() -> None:
    collector = prometheus.DeviceStatsCollector()
    stats = {"a_bytes": math.inf, "b_bytes": math.nan, "c": "many"}
    collector.update([accelctl.DeviceStats("acme", "acme:0", stats)])  # type: ignore[arg-type]
    values = {f.name: f.samples[0].value for f in collector.collect() if f.samples}
    assert values["accelctl_a_bytes"] == math.inf
    assert math.isnan(values["accelctl_b_bytes"]) and math.isnan(values["accelctl_c"])


def test_an_unknown_accelerator_and_a_bad_interval_are_refused(gpu_site: FakeSite) -> None:
    with pytest.raises(accelctl.UnknownAcceleratorError, match="no accelerator named 'nosuch'"):
        prometheus.serve(0, accelerator="nosuch")
    with pytest.raises(ValueError, match="interval=0"):
        prometheus.serve(0, interval=0)


# -- accelctl stats --prometheus ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_command_serves_until_stopped_and_exits_0(
    gpu_site: FakeSite, stop: signal.Signals
) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    environ |= {
        "ACCELCTL_PLUGINS": "fakegpu,broken",
        "ACCELCTL_HOOK_TIMEOUT": os.environ["ACCELCTL_HOOK_TIMEOUT"],
        "PYTHONPATH": os.pathsep.join([*gpu_site.path, environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "accelctl", "stats", "--prometheus", "127.0.0.1:0"]
    process = subprocess.Popen(
        [*command, "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line.startswith("serving Prometheus metrics of 3 devices on http://127.0.0.1:")
        assert line.rstrip().endswith("read every 0.2s; Ctrl-C to stop")
        url = line.split(" on ", 1)[1].split(",", 1)[0]
        samples = scrape(url)
        process.send_signal(stop)
        code = process.wait(timeout=PROCESS_GUARD_S)
        stderr = process.stderr.read()
    finally:
        process.kill()
    for name, value in KNOWN.items():
        assert samples[name][on("fakegpu", "meta:0")] == value, name
    assert samples["accelctl_device_up"][on("fakegpu", "meta:1")] == 0
    assert samples["accelctl_device_up"][on("broken", "?")] == 0
    assert code == 0, stderr
    # Each failing device is said once, however many rounds failed.
    assert stderr.count("warning: meta:1 (fakegpu): ") == 1 and "sensor offline" in stderr
    assert stderr.count("warning: ? (broken): ") == 1
    assert "Traceback" not in stderr


@pytest.mark.parametrize("value", ["", "port", "-1", "65536", ":9400", "host:", "1.5"])
def test_the_port_is_checked_before_anything_runs(cli: Cli, value: str) -> None:
    result = cli("stats", "--prometheus", value)
    assert result.exit_code == 2
    assert "Invalid value for '--prometheus'" in result.stderr
    assert "give PORT (0 to 65535; 0: any free one) or HOST:PORT" in result.stderr


def test_json_and_prometheus_together_are_a_usage_error(cli: Cli) -> None:
    result = cli("stats", "--prometheus", "0", "--json")
    assert result.exit_code == 2
    assert "--json prints the figures, --prometheus serves them: give one" in result.stderr


def test_a_port_in_use_is_a_one_line_error(cli: Cli, gpu_site: FakeSite) -> None:
    with prometheus.serve(0, address="127.0.0.1", interval=3600) as exporter:
        result = cli("stats", "fakegpu", "--prometheus", f"127.0.0.1:{exporter.port}")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"error: cannot serve Prometheus metrics on 127.0.0.1:{exporter.port}: "
    )
    assert result.stderr.count("\n") == 1 and "choose another port" in result.stderr


def test_without_prometheus_client_the_command_says_what_to_install(
    cli: Cli, gpu_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # an import of it fails
    monkeypatch.delitem(sys.modules, "accelctl.exporters.prometheus")
    monkeypatch.delattr(importlib.import_module("accelctl.exporters"), "prometheus")
    result = cli("stats", "--prometheus", "0")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: accelctl.exporters.prometheus needs prometheus-client (prometheus_client is "
        "missing): pip install 'accelctl[prometheus]' (in a clone of accelctl, from its folder: "
        "pip install -e '.[prometheus]')\n"
    )

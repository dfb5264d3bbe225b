"""The device figures of the available accelerators as Prometheus metrics, served over HTTP.

From a shell, ``accelctl stats --prometheus 9400``; from a training script::

    from accelctl.exporters import prometheus

    exporter = prometheus.serve(9400)  # http://<this host>:9400/metrics, read every 5 s
    ...
    exporter.close()

The readings are :func:`accelctl.watch_stats`' rounds, taken on a thread of the exporter's own every
``interval`` seconds; a scrape answers with the latest round at once, so it never waits on a
plugin (each round's plugins are read under ``ACCELCTL_HOOK_TIMEOUT``, and a plugin stuck past it
is a device whose reading failed, not asked again while it is stuck). The exposition format and
the HTTP server are prometheus-client's (extra ``accelctl[prometheus]``).

Each ``device_stats`` key is one gauge, ``accelctl_<key>`` with every character a metric name
cannot hold (the ``.`` of a vendor's prefix) made ``_``, labelled ``accelerator`` and ``device``;
its unit is its suffix, as the vocabulary has it (docs/monitoring.md): ``_bytes``, ``_watts``,
``_celsius`` and ``_per_second`` stay as they are, ``_hz`` becomes ``_hertz`` and ``_percent``
(0-100) becomes ``_ratio`` (0-1), Prometheus' base units. Beside them:
``accelctl_device_up`` (1 when the device was read in the latest round, 0 when its reading
failed, device ``"?"`` for a broken plugin), ``accelctl_read_errors_total`` (its failed readings
since the exporter started) and ``accelctl_last_read_timestamp_seconds`` (when the latest round
was read).
"""

from __future__ import annotations

import math
import re
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._base.text import one_line, quote
from .._contract.errors import AccelctlError, PluginWarning
from .._contract.extras import extra_missing
from .._readings.stats import DeviceStats, watch_stats

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
except ModuleNotFoundError as exc:
    raise extra_missing(
        "accelctl.exporters.prometheus", "prometheus-client", "prometheus", exc
    ) from exc

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DeviceStatsCollector",
    "MetricName",
    "PrometheusExporter",
    "metric_name",
    "serve",
]

#: Seconds between two readings unless told.
DEFAULT_INTERVAL_S = 5.0
#: What every metric's name starts with.
PREFIX = "accelctl_"
#: The labels of every per-device metric.
LABELS = ("accelerator", "device")

#: A key's unit suffix -> (the metric's suffix, the factor to that unit).
_UNITS: tuple[tuple[str, str, float], ...] = (
    ("_bytes", "bytes", 1.0),
    ("_percent", "ratio", 0.01),
    ("_watts", "watts", 1.0),
    ("_celsius", "celsius", 1.0),
    ("_hz", "hertz", 1.0),
    ("_per_second", "per_second", 1.0),
)
_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_]")


@dataclass(frozen=True)
class MetricName:
    """The Prometheus metric of one ``device_stats`` key: its name, unit and scale.

    ``unit``: Prometheus' unit, the name's suffix (``""`` for a count or a ratio without a
    suffix); ``scale`` turns the key's value into the metric's (0.01 for a percentage)."""

    name: str
    unit: str
    scale: float


def metric_name(key: str) -> MetricName:
    """The metric of ``key`` (any key: a vendor's own included, its unit from its suffix)::

    metric_name("memory_used_bytes")   # accelctl_memory_used_bytes
    metric_name("utilization_percent") # accelctl_utilization_ratio, scale 0.01
    metric_name("cuda.sm_clock_hz")    # accelctl_cuda_sm_clock_hertz
    """
    stem, unit, scale = key, "", 1.0
    for suffix, metric_unit, factor in _UNITS:
        if key.endswith(suffix) and len(key) > len(suffix):
            stem, unit, scale = key[: -len(suffix)], metric_unit, factor
            break
    name = PREFIX + _NOT_IN_A_NAME.sub("_", stem) + (f"_{unit}" if unit else "")
    # "per_second" is a suffix, not one of OpenMetrics' units.
    return MetricName(name, "" if unit == "per_second" else unit, scale)


class DeviceStatsCollector:
    """A prometheus-client collector of the latest round of readings.

    The readings come from :meth:`update`; each scrape reads what it holds (:meth:`collect`),
    never a plugin."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: list[DeviceStats] = []
        self._read_at: float | None = None
        self._errors: Counter[tuple[str, str]] = Counter()
        self._owners: dict[str, str] = {}  # metric name -> the key that has it
        self._refused: set[str] = set()  # keys whose name another key has (warned about once)
        self._devices: dict[str, list[str]] = {}  # accelerator -> its devices, last listed

    @property
    def readings(self) -> list[DeviceStats]:
        """The latest round of readings (a copy)."""
        with self._lock:
            return list(self._readings)

    def update(self, readings: list[DeviceStats], read_at: float | None = None) -> None:
        """Hold ``readings`` for the next scrapes, counting failed readings.

        ``read_at``: when they were read, Unix time, default now. Each reading with an error
        counts one more failed reading of its device."""
        with self._lock:
            self._readings = self._per_device(readings)
            self._read_at = time.time() if read_at is None else read_at
            self._errors.update(
                (reading.accelerator, reading.device) for reading in readings if reading.error
            )

    def _per_device(self, readings: list[DeviceStats]) -> list[DeviceStats]:
        """Return ``readings``, keeping the series of devices that could not be listed.

        Where an accelerator's devices could not even be listed (device ``"?"``: a plugin stuck
        past its deadline, or broken since) and were listed before, each of those devices comes
        with that error: their series go on, down, rather than end."""
        result: list[DeviceStats] = []
        for reading in readings:
            known = self._devices.get(reading.accelerator, [])
            if reading.device == "?" and reading.error and known:
                result += [DeviceStats(reading.accelerator, d, error=reading.error) for d in known]
            else:
                result.append(reading)
        for accelerator in {reading.accelerator for reading in readings}:
            listed = [r.device for r in readings if r.accelerator == accelerator]
            if listed != ["?"]:
                self._devices[accelerator] = listed
        return result

    def collect(self) -> Iterator[Metric]:
        """The metrics of the latest round (prometheus-client's collector protocol)."""
        with self._lock:
            readings, read_at, errors = list(self._readings), self._read_at, Counter(self._errors)
        up = GaugeMetricFamily(
            f"{PREFIX}device_up",
            "1 when the device's figures were read in the latest round, 0 when its reading "
            'failed (a broken plugin: device "?")',
            labels=LABELS,
        )
        failed = CounterMetricFamily(
            f"{PREFIX}read_errors",
            "Readings of the device that failed since the exporter started",
            labels=LABELS,
        )
        figures: dict[str, GaugeMetricFamily] = {}
        for reading in readings:
            labels = [reading.accelerator, reading.device]
            up.add_metric(labels, 0.0 if reading.error else 1.0)
            for key, value in sorted(reading.stats.items()):
                metric = self._metric(key)
                if metric is None:
                    continue
                family = figures.get(metric.name)
                if family is None:
                    family = figures[metric.name] = GaugeMetricFamily(
                        metric.name,
                        f"The device_stats figure {key!r} of the accelctl plugin",
                        labels=LABELS,
                        unit=metric.unit,
                    )
                family.add_metric(labels, _number(value) * metric.scale)
        # Every device read is counted from 0, so that a rate over its first failure is right.
        for reading in readings:
            errors.setdefault((reading.accelerator, reading.device), 0)
        for (accelerator, device), count in sorted(errors.items()):
            failed.add_metric([accelerator, device], float(count))
        yield up
        yield failed
        if read_at is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}last_read_timestamp_seconds",
                "When the latest round of readings was taken (Unix time)",
                value=read_at,
            )
        yield from (figures[name] for name in sorted(figures))

    def _metric(self, key: str) -> MetricName | None:
        """The metric of ``key``; None (and a warning, once) when another key has its name."""
        metric = metric_name(key)
        owner = self._owners.setdefault(metric.name, key)
        if owner == key:
            return metric
        if key not in self._refused:
            self._refused.add(key)
            warnings.warn(
                f"device_stats key {quote(key)} is not exported: its metric name "
                f"{metric.name} is key {quote(owner)}'s; a plugin should use one of the two",
                PluginWarning,
                stacklevel=2,
            )
        return None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):  # the handle checks the types; a hand-made reading may not
        return math.nan


class PrometheusExporter:
    """The device figures served at ``http://<address>:<port>/metrics``.

    Read every ``interval`` seconds on a thread of its own (:func:`serve` makes one)."""

    def __init__(
        self,
        port: int,
        *,
        address: str = "0.0.0.0",
        accelerator: str | None = None,
        interval: float = DEFAULT_INTERVAL_S,
    ) -> None:
        if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
            raise ValueError(
                f"interval={interval!r}: give the seconds between two readings, a positive number"
            )
        self.interval = float(interval)
        self.collector = DeviceStatsCollector()
        self._rounds = watch_stats(accelerator)
        self.collector.update(next(self._rounds))  # a name nothing provides raises here
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        try:
            self._server, _ = start_http_server(port, address, self.registry)
        except OSError as exc:
            raise AccelctlError(
                f"cannot serve Prometheus metrics on {address}:{port}: "
                f"{exc.strerror or exc}; choose another port (0: any free one)"
            ) from exc
        self.address = address
        self._stop = threading.Event()
        self._reader = threading.Thread(
            target=self._read_every_interval, name="accelctl-prometheus", daemon=True
        )
        self._reader.start()

    @property
    def port(self) -> int:
        """The port served (the one the system chose, for ``port=0``)."""
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        """``http://<address>:<port>/metrics``."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    @property
    def readings(self) -> list[DeviceStats]:
        """The latest round of readings, as the next scrape shows it."""
        return self.collector.readings

    def _read_every_interval(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                readings = next(self._rounds)
            except Exception as exc:  # accelctl's own bug: each device shows it; reading goes on
                error = f"reading failed: {one_line(exc)}"
                readings = [
                    DeviceStats(reading.accelerator, reading.device, error=error)
                    for reading in self.collector.readings
                ]
            self.collector.update(readings)

    def close(self) -> None:
        """Stop serving and reading (idempotent).

        A round under way ends on its own (its thread is a daemon), under its plugins' deadlines."""
        if not self._stop.is_set():
            self._stop.set()
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> PrometheusExporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve(
    port: int,
    *,
    address: str = "0.0.0.0",
    accelerator: str | None = None,
    interval: float = DEFAULT_INTERVAL_S,
) -> PrometheusExporter:
    """Serve the device figures as Prometheus metrics.

    Of every available accelerator, or of ``accelerator`` (a name, an alias, ``"gpu"`` or
    ``"auto"``), at ``http://<address>:<port>/metrics`` (``port=0``: any free port, see
    :attr:`PrometheusExporter.port`; ``address``: the interface to listen on, every one by
    default), read every ``interval`` seconds. The first round is read before this returns.
    Close the exporter (or use it as a context manager) to stop.

    :raises UnknownAcceleratorError, AcceleratorUnavailableError, PluginLoadError: for
        ``accelerator``, as :func:`accelctl.read_stats` would.
    :raises AccelctlError: the port cannot be served (taken, or not allowed).
    """
    return PrometheusExporter(port, address=address, accelerator=accelerator, interval=interval)

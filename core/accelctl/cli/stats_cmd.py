"""``accelctl stats``: the device figures of the available accelerators, once or every N seconds.

No torch import of its own: devices are named by their strings (``"cuda:0"``) and each plugin's
``device_stats`` takes that form, importing torch only where it needs it (a device in use).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import click

from .._device_string import device_string
from .._errors import AccelctlError
from .._fanout import restart_clock, run_each, run_one
from .._plugin import AcceleratorHandle
from .._registry import get_registry
from .._status import AcceleratorStatus, settle
from .._text import one_line, printable_line
from ._output import echo_line, emit_json, format_table, json_text

#: Table columns for the contract's common keys: (header, keys that fill it).
_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MEMORY USED/TOTAL", ("memory_used_bytes", "memory_total_bytes")),
    ("ALLOCATED", ("memory_allocated_bytes",)),
    ("RESERVED", ("memory_reserved_bytes",)),
    ("UTIL", ("utilization_percent",)),
    ("TEMP", ("temperature_celsius",)),
    ("POWER", ("power_watts",)),
    ("CPU", ("cpu_percent",)),
    ("SWAP", ("swap_percent",)),
)
_COMMON = frozenset(key for _, keys in _COLUMNS for key in keys)


@dataclass
class DeviceReading:
    """The figures of one device, or why they could not be read."""

    accelerator: str
    device: str
    stats: dict[str, int | float] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``accelerator``, ``device``, ``stats`` and ``error`` (null when read)."""
        return asdict(self)


def _primed(name: str | None) -> list[AcceleratorHandle]:
    """The accelerators to read, each read once already and waited for (rates since the previous
    reading, such as the CPU's ``cpu_percent``, say 0 the first time; hooks may not sleep, the
    CLI may): NAME, which must be available, or every available one, read as soon as its probe
    says so, under a deadline of its own, while the other plugins' probes go on. Broken plugins
    are skipped with a warning on stderr; one whose first reading did not answer stays, so that
    its reading is an error (its stuck thread is not asked again)."""
    primed: list[tuple[float, float]] = []  # (found, read thrown away), per accelerator
    if name is not None:
        from .._selection import select_accelerator  # a name only: not the default's path

        handles = [run_one(lambda: select_accelerator(name))]
        found = time.monotonic()
        read_all(handles)
        primed.append((found, time.monotonic()))
    else:
        probed: dict[AcceleratorHandle, AcceleratorStatus] = {}

        def probe_and_read(handle: AcceleratorHandle) -> AcceleratorStatus:
            probed[handle] = status = handle.probe()
            if status.available:
                found = time.monotonic()
                restart_clock()  # the reading has a deadline of its own
                _read(handle)
                primed.append((found, time.monotonic()))
            return status

        plugins = get_registry().plugins()
        handles = []
        for status in settle(plugins, run_each(plugins, probe_and_read)):
            handle = status.accelerator
            if status.error is not None and handle in probed and probed[handle].available:
                handles.append(handle)  # detected; its first reading did not answer in time
            elif status.error is not None:
                echo_line(f"warning: skipping {status.name}: {status.error}", err=True)
            elif status.available:
                handles.append(handle)
    # The first reading thrown away is inside the wait (for the CPU, psutil's import), but
    # never leaves less than the gap before the one shown.
    if primed:
        ready = max(
            max(found + FIRST_READING_WAIT_S, read + READING_GAP_MIN_S) for found, read in primed
        )
        wait = ready - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return handles


def _devices(handle: AcceleratorHandle) -> list[str]:
    """Every device ``devices="auto"`` gives, as strings (``"<type>:<i>"``, or ``"<type>"`` once
    for a process count), without importing torch: the type is ``device_type``, else the name."""
    parsed = handle.parse_devices("auto")
    kind = handle.info.device_type or handle.name
    if isinstance(parsed, int):
        return [device_string(kind)]
    return list(dict.fromkeys(device_string(kind, index) for index in parsed))


def _read(handle: AcceleratorHandle) -> list[DeviceReading]:
    try:
        devices = _devices(handle)
    except AccelctlError as exc:
        return [DeviceReading(handle.name, "?", error=one_line(exc))]
    readings = []
    for device in devices:
        try:
            readings.append(DeviceReading(handle.name, device, handle.device_stats(device)))
        except AccelctlError as exc:
            readings.append(DeviceReading(handle.name, device, error=one_line(exc)))
    return readings


def read_all(handles: list[AcceleratorHandle]) -> list[DeviceReading]:
    """One reading per device of each accelerator, the accelerators read at once, each under
    the deadline; a hook that fails or does not answer gives a reading with an error instead of
    stopping the others."""
    readings = []
    for handle, read in zip(handles, run_each(handles, _read), strict=True):
        if isinstance(read, AccelctlError):
            readings.append(DeviceReading(handle.name, "?", error=one_line(read)))
        else:
            readings.extend(read)
    return readings


def _size(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _cell(header: str, stats: dict[str, int | float]) -> str | None:
    stats = {key: value for key, value in stats.items() if math.isfinite(value)}  # NaN: "-"
    if header == "MEMORY USED/TOTAL":
        used, total = stats.get("memory_used_bytes"), stats.get("memory_total_bytes")
        if used is None or total is None:
            return None
        return f"{_size(used)} / {_size(total)}"
    if header in ("ALLOCATED", "RESERVED"):
        value = stats.get(f"memory_{header.lower()}_bytes")
        return None if value is None else _size(value)
    keys = dict(_COLUMNS)[header]
    value = stats.get(keys[0])
    if value is None:
        return None
    unit = {"TEMP": " C", "POWER": " W"}.get(header, "%")
    return f"{value:.0f}{unit}" if header != "POWER" else f"{value:.1f}{unit}"


def render_table(readings: list[DeviceReading]) -> str:
    """A table of the common figures (columns no device has are left out), then each device's
    other figures and errors, one line each."""
    if not readings:
        return "no available accelerator has devices to read"
    present = {key for reading in readings for key in reading.stats}
    columns = [header for header, keys in _COLUMNS if present.intersection(keys)]
    rows: list[list[str | None]] = [
        [reading.accelerator, reading.device, *(_cell(h, reading.stats) for h in columns)]
        for reading in readings
    ]
    lines = [format_table(["ACCELERATOR", "DEVICE", *columns], rows)]
    notes = []
    for reading in readings:
        if reading.error:
            notes.append(f"{reading.device} ({reading.accelerator}): error: {reading.error}")
            continue
        extras = {k: v for k, v in sorted(reading.stats.items()) if k not in _COMMON}
        if extras:
            shown = ", ".join(
                f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in extras.items()
            )
            notes.append(f"{reading.device}: {shown}")
    if notes:
        lines += ["", *(printable_line(note) for note in notes)]
    return "\n".join(lines)


#: The shortest and longest ``--watch`` intervals (a busy loop; a day).
WATCH_MIN_S = 0.1
WATCH_MAX_S = 86400.0
#: From finding an accelerator to its first reading shown; the reading thrown away is taken
#: inside this wait...
FIRST_READING_WAIT_S = 0.2
#: ...and at least this long before the one shown (psutil's minimum for a meaningful rate).
READING_GAP_MIN_S = 0.1


def _check_interval(
    ctx: click.Context, param: click.Parameter, value: float | None
) -> float | None:
    # click's FloatRange lets nan through (every comparison with nan is False).
    if value is not None and not (math.isfinite(value) and WATCH_MIN_S <= value <= WATCH_MAX_S):
        raise click.BadParameter(
            f"{value:g} is not an interval: give the seconds between two readings, from "
            f"{WATCH_MIN_S:g} to {WATCH_MAX_S:g} (a day)",
            ctx=ctx,
            param=param,
        )
    return value


@click.command("stats")
@click.argument("name", required=False)
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON: an array of {accelerator, device, stats}."
)
@click.option(
    "--watch",
    type=float,
    callback=_check_interval,
    metavar="SECONDS",
    help=f"Read again every SECONDS ({WATCH_MIN_S:g} to {WATCH_MAX_S:g}) until Ctrl-C "
    "(with --json: one JSON array per line).",
)
def stats_command(name: str | None, as_json: bool, watch: float | None) -> None:
    """Show device figures (memory, utilisation, temperature, power) of every device of the
    available accelerators, or of accelerator NAME ("gpu" picks the best available GPU).

    Exits 1 when NAME is unknown or unavailable, or when a device's figures could not be read.
    """
    handles = _primed(name)
    if watch is None:
        readings = read_all(handles)
        if as_json:
            emit_json([reading.to_dict() for reading in readings])
        else:
            click.echo(render_table(readings))
        if any(reading.error for reading in readings):
            raise click.exceptions.Exit(1)
        return
    try:
        while True:
            readings = read_all(handles)
            if as_json:
                click.echo(json_text([reading.to_dict() for reading in readings], indent=None))
            else:
                if sys.stdout.isatty():
                    click.clear()
                stamp = time.strftime("%H:%M:%S")
                click.echo(f"{stamp}  every {watch:g}s, Ctrl-C to stop")
                click.echo(render_table(readings) + "\n")
            time.sleep(watch)
    except KeyboardInterrupt:
        return

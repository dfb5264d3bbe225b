"""``accelctl stats``: the device figures of the available accelerators, once or every N seconds.

The readings are the library's (:func:`accelctl.read_stats`, :func:`accelctl.watch_stats`): no
torch import, the first reading real; this module formats them.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator

import click

from .._base.text import printable_line
from .._readings.stats import DeviceStats, watch_stats
from ._child import run_in_child
from ._output import emit_json, format_table, json_text
from ._prometheus import parse_address

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


def render_table(readings: list[DeviceStats]) -> str:
    """Render a table of the common figures, then each device's others and errors.

    Columns no device has are left out; each device's other figures and errors take one line
    each."""
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
        if not reading.stats:  # say why the row is empty rather than leave it blank
            notes.append(
                f"{reading.device} ({reading.accelerator}): no figures from this process; an "
                "allocator counts per process (out-of-tree backends, MPS): the process using "
                "the device has them, e.g. in the Trainer's metrics.jsonl"
            )
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
    "(with --json: one JSON array per line; with --prometheus: between two readings, "
    "default 5).",
)
@click.option(
    "--prometheus",
    "serve_on",
    callback=parse_address,
    metavar="[HOST:]PORT",
    help="Serve the figures as Prometheus metrics at http://HOST:PORT/metrics (HOST: every "
    "interface unless given; PORT 0: any free one) until Ctrl-C or SIGTERM (exit 0). Needs "
    "accelctl[prometheus].",
)
def stats_command(
    name: str | None,
    as_json: bool,
    watch: float | None,
    serve_on: tuple[str, int] | None,
) -> None:
    """Show device figures of every available accelerator, or of accelerator NAME.

    Memory, utilisation, temperature and power of each device; NAME "gpu" picks the best available
    GPU.

    Exits 1 when NAME is unknown or unavailable, when a device's figures could not be read, or
    when a plugin is broken (named or not: its row says why).
    """
    if serve_on is not None:
        if as_json:
            raise click.UsageError("--json prints the figures, --prometheus serves them: give one")
        from ._prometheus import serve_prometheus

        serve_prometheus(name, *serve_on, interval=watch)
        return
    # Read in a process of their own, which reads again every `watch` seconds (closing the
    # rounds stops it).
    if watch is None:
        # The accelerators found, read, waited for and read again.
        [readings] = run_in_child(lambda: _rounds(name, None))
        if as_json:
            emit_json([reading.to_dict() for reading in readings])
        else:
            click.echo(render_table(readings))
        if any(reading.error for reading in readings):
            raise click.exceptions.Exit(1)
        return
    with contextlib.closing(run_in_child(lambda: _rounds(name, watch))) as rounds:
        readings = next(rounds)
        try:
            while True:
                if as_json:
                    click.echo(json_text([r.to_dict() for r in readings], indent=None))
                else:
                    if sys.stdout.isatty():
                        click.clear()
                    stamp = time.strftime("%H:%M:%S")
                    click.echo(f"{stamp}  every {watch:g}s, Ctrl-C to stop")
                    click.echo(render_table(readings) + "\n")
                readings = next(rounds)
        except KeyboardInterrupt:
            return


def _rounds(name: str | None, watch: float | None) -> Iterator[list[DeviceStats]]:
    """The rounds of readings: one, or one every ``watch`` seconds."""
    rounds = watch_stats(name)
    yield next(rounds)
    while watch is not None:
        time.sleep(watch)
        yield next(rounds)

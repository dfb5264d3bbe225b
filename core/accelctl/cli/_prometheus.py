"""``accelctl stats --prometheus [HOST:]PORT``: the Prometheus exporter, run until stopped.

The exporter of :mod:`accelctl.exporters.prometheus`; Ctrl-C or SIGTERM stops it (exit 0). It says
on stderr when a device's reading fails."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click

from .._base.text import printable_line

if TYPE_CHECKING:
    from .._readings.stats import DeviceStats

#: How often the command looks for a device whose reading newly failed (and for a signal).
CHECK_S = 0.5


def parse_address(
    ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> tuple[str, int] | None:
    """Parse ``[HOST:]PORT`` into ``(host, port)``.

    ``"9400"``, ``"127.0.0.1:9400"``, ``"[::1]:9400"`` -> (host, port); the host is every
    interface (``0.0.0.0``) when not given; port 0 is any free port."""
    if value is None:
        return None
    text = value.strip()
    host, colon, port_text = text.rpartition(":")
    host = host.strip("[]") if colon else "0.0.0.0"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not (0 <= port <= 65535) or (colon and not host):
        raise click.BadParameter(
            f"{value!r} is not a port to serve on: give PORT (0 to 65535; 0: any free one) or "
            "HOST:PORT (127.0.0.1:9400, [::1]:9400)",
            ctx=ctx,
            param=param,
        )
    return host, port


@contextlib.contextmanager
def _stopped_by_sigterm(stop: threading.Event) -> Iterator[None]:
    """SIGTERM (a service manager's, ``kill``) stops the command as Ctrl-C does."""

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread (an embedding program): its own signals rule
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve_prometheus(name: str | None, host: str, port: int, interval: float | None) -> None:
    """Serve Prometheus metrics until Ctrl-C or SIGTERM.

    Read every ``interval`` seconds (None: the exporter's default); a line on stdout says where, a
    ``warning:`` line on stderr each time a device's reading fails anew (its ``accelctl_device_up``
    is then 0)."""
    from ..exporters import prometheus  # needs the extra: a one-line error without it

    if interval is None:
        interval = prometheus.DEFAULT_INTERVAL_S

    stop = threading.Event()
    warned: set[tuple[str, str, str]] = set()

    def warn_anew(readings: list[DeviceStats]) -> None:
        for reading in readings:
            if reading.error is None:
                continue
            seen = (reading.accelerator, reading.device, reading.error)
            if seen not in warned:
                warned.add(seen)
                line = f"{reading.device} ({reading.accelerator}): {reading.error}"
                click.echo(f"warning: {printable_line(line)}", err=True)

    with prometheus.serve(port, address=host, accelerator=name, interval=interval) as exporter:
        devices = len(exporter.readings)
        try:
            # SIGTERM's handler first: once the line says where, a service manager may stop it;
            # and the first round's failures said before it, whenever it is stopped.
            with _stopped_by_sigterm(stop):
                warn_anew(exporter.readings)
                click.echo(
                    f"serving Prometheus metrics of {devices} device{'s' * (devices != 1)} on "
                    f"{exporter.url}, read every {interval:g}s; Ctrl-C to stop"
                )
                while not stop.wait(CHECK_S):
                    warn_anew(exporter.readings)
        except KeyboardInterrupt:
            pass

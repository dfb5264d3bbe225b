"""Device figures of the available accelerators: :func:`read_stats` and :func:`watch_stats`.

No torch import of its own: devices are named by their strings (``"cuda:0"``) and each plugin's
``device_stats`` takes that form, importing torch only where it needs it (a device in use). A
figure that is a rate since the previous reading (the CPU's ``cpu_percent``) says 0 on a
process's first reading, so the first round is read twice: once to throw away, then after a wait
(docs/concepts.md section 7).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .._base.device_string import device_string
from .._base.text import one_line
from .._choice.selection import select_accelerator
from .._contract.errors import AccelctlError
from .._host.fanout import run_each, run_one
from .._host.handle import AcceleratorHandle
from .._host.registry import get_registry, load_each
from .._host.status import probe, settle

#: From finding an accelerator to its first reading returned; the reading thrown away is taken
#: inside this wait...
FIRST_READING_WAIT_S = 0.2
#: ...and at least this long before the one returned (psutil's minimum for a meaningful rate).
READING_GAP_MIN_S = 0.1


@dataclass
class DeviceStats:
    """The figures of one device, or why they could not be read.

    ``stats``: ``device_stats``' flat dict, units in the keys; empty where ``error`` (one line)
    says why."""

    accelerator: str
    device: str
    stats: dict[str, int | float] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the reading as ``accelctl stats --json`` prints it.

        JSON-ready: ``accelerator``, ``device``, ``stats`` and ``error`` (null when read)."""
        return dataclasses.asdict(self)


def read_stats(accelerator: str | None = None) -> list[DeviceStats]:
    """Read each device of every available accelerator, or of ``accelerator``, once.

    ``accelerator``: a name, an alias, ``"gpu"`` or ``"auto"``, which must be available. The
    accelerators are read at once, each under ``ACCELCTL_HOOK_TIMEOUT``. Rates are real: each
    accelerator is read once to throw away, and again 0.2 s after it was found (never less than 0.1
    s after that first reading).

    A plugin that is broken (it fails to load, or its probe fails) is a reading with its
    ``error`` and device ``"?"``, as when ``accelerator`` names it (where it raises); a hook that
    fails or does not answer is that device's ``error``; neither stops the others.

    :raises UnknownAcceleratorError, AcceleratorUnavailableError, PluginLoadError: for
        ``accelerator``, as :func:`accelctl.resolve` would.
    """
    return next(watch_stats(accelerator))


def watch_stats(accelerator: str | None = None) -> Iterator[list[DeviceStats]]:
    """Yield rounds of readings of the same accelerators, each when asked.

    The first as :func:`read_stats` returns it, each next one when asked (the caller waits between
    them; ``accelctl stats --watch``)."""
    handles, broken = _primed(accelerator)
    while True:
        yield _read_all(handles) + broken


def _primed(name: str | None) -> tuple[list[AcceleratorHandle], list[DeviceStats]]:
    """Return the accelerators to read, each read once already, and the broken ones' readings.

    The first read is waited for (hooks may not sleep; this may). NAME, which must be available, or
    every available one, all probed at once, then all read once at once. One whose first reading did
    not answer stays, so that its reading is an error (its stuck thread is not asked again). Also
    returns a reading with its error for each broken plugin: its figures could not be read either,
    whether it was named or not (the same exit status for both)."""
    broken: list[DeviceStats] = []
    if name is not None:
        handles = [run_one(lambda: select_accelerator(name), get_registry().named(name))]
    else:
        plugins = get_registry().plugins()
        load_each(plugins)
        handles = []
        for status in settle(plugins, run_each(plugins, probe)):
            if status.error is not None:
                broken.append(DeviceStats(status.name, "?", error=status.error))
            elif status.available:
                handles.append(status.accelerator)
    found = time.monotonic()
    _read_all(handles)  # thrown away: a rate's first reading says 0
    # The first reading is inside the wait (for the CPU, psutil's import), but never leaves less
    # than the gap before the one returned.
    ready = max(found + FIRST_READING_WAIT_S, time.monotonic() + READING_GAP_MIN_S)
    if handles:
        time.sleep(max(0.0, ready - time.monotonic()))
    return handles, broken


def _devices(handle: AcceleratorHandle) -> list[str]:
    """Return every device ``devices="auto"`` gives, as strings, without importing torch.

    ``"<type>:<i>"``, or ``"<type>"`` once for a process count; the type is ``device_type``,
    else the name."""
    parsed = handle.parse_devices("auto")
    kind = handle.info.device_type or handle.plugin_name
    if isinstance(parsed, int):
        return [device_string(kind)]
    return list(dict.fromkeys(device_string(kind, index) for index in parsed))


def _read(handle: AcceleratorHandle) -> list[DeviceStats]:
    try:
        devices = _devices(handle)
    except AccelctlError as exc:
        return [DeviceStats(handle.name, "?", error=one_line(exc))]
    readings = []
    for device in devices:
        try:
            readings.append(DeviceStats(handle.name, device, handle.device_stats(device)))
        except AccelctlError as exc:
            readings.append(DeviceStats(handle.name, device, error=one_line(exc)))
    return readings


def _read_all(handles: list[AcceleratorHandle]) -> list[DeviceStats]:
    readings = []
    for handle, read in zip(handles, run_each(handles, _read), strict=True):
        if isinstance(read, AccelctlError):
            readings.append(DeviceStats(handle.name, "?", error=one_line(read)))
        else:
            readings.extend(read)
    return readings

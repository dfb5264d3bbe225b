"""More CPU processes than cores: allowed, but said once, before any process starts.

Allowed so that a multi-process set-up can be tried on a laptop. The warning gives the count, the
cores and what to do.
"""

from __future__ import annotations

import os

from .._choice.selection import Selection
from .._contract.errors import warn_user


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_oversubscription(selection: Selection, *, option: str) -> str | None:
    """Return the warning for running more CPU processes than there are cores, or None.

    ``option`` spells the devices option as the caller's user writes it (``"--devices "`` on the
    command line, ``"devices="`` in Python)."""
    processes = len(selection.devices)
    cores = usable_cores()
    if processes <= cores or any(device.type != "cpu" for device in selection.devices):
        return None
    plural = "s" if cores > 1 else ""
    return (
        f"{processes} CPU processes were asked for, but this machine has {cores} core{plural}: "
        f"they will share them and train slower than {cores} would; use {option}{cores} or "
        "fewer (more processes than cores only serves to try a multi-process set-up)"
    )


def warn_cpu_oversubscription(selection: Selection) -> None:
    """Warn with :func:`cpu_oversubscription` on the caller's line.

    A ``UserWarning``, for Python's API: ``accelctl.launch(..., devices=64)``."""
    message = cpu_oversubscription(selection, option="devices=")
    if message is not None:
        warn_user(message)

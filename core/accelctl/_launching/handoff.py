"""What launched processes receive from their launcher: the selection, resolved once.

The selection, resolved once, through ``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES`` set in
``os.environ`` while they start (each takes ``devices[LOCAL_RANK]``). Visible-device variables are
left alone: narrowing them would renumber the devices (docs/training.md, "Choices accelctl launch
makes")."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence

from .._choice.selection import Selection
from .._contract.device_specs import devices_spec
from .._contract.settings import ACCELERATOR as ENV_ACCELERATOR
from .._contract.settings import DEVICES as ENV_DEVICES


def selection_environment(selection: Selection) -> dict[str, str]:
    """Return ``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES`` for the children of a launch.

    Only the devices for an instance without an entry point: the script passes the instance
    itself."""
    env = {ENV_DEVICES: devices_spec(selection.parsed)}
    if selection.accelerator.entry_point is not None:
        # The plugin's own name: a child's lookup by it loads that plugin alone (an alias such
        # as "openreg" asks every plugin for its aliases).
        env[ENV_ACCELERATOR] = selection.accelerator.plugin_name
    return env


def launch_command_line(accelerator: str | None, devices: str, argv: Sequence[str]) -> str:
    """Return the shell line ``accelctl launch ... ARGV`` that hands this selection to ``argv``.

    ``argv`` is a script and its arguments; the line is what a Trainer asked for several devices
    outside a launcher suggests."""
    parts = ["accelctl", "launch"]
    if accelerator:
        parts += ["--accelerator", accelerator]
    parts += ["--devices", devices, *argv]
    return shlex.join(parts)


def cores_per_process(nproc: int) -> int:
    """Return an equal share of this machine's cores for each of ``nproc`` processes.

    At least one: torchrun's default of one thread per process starves CPU training on a large
    machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // nproc)


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the duration, then restore what was there."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

"""What a Ray node advertises: its accelctl devices as a custom resource.

The command ``accelctl ray-resources`` prints them for ``ray start --resources``.

Ray schedules a worker on a node that has the resources it asks for; it knows GPUs (and a few
chips of its own) but nothing of an accelctl plugin's devices. A node therefore advertises them as
a custom resource named after the devices' torch type (``openreg``, ``npu``, ``hpu``; ``cuda``
for the CUDA plugin), counted by the plugin's ``auto_device_count()``, and each worker asks for
one unit of it (``ScalingConfig(resources_per_worker={"npu": 1})``): Ray then puts at most as
many workers on a node as it has devices.

No Ray here: the command runs on a node before ``ray start`` (the core's CLI reaches it through
the entry-point group ``accelctl.commands``, so ``accelctl list`` never imports it), and nothing
imports torch but the plugin's own hooks.
"""

from __future__ import annotations

import json
from typing import Any

import click

import accelctl
from accelctl._choice.selection import (
    known_name,  # the name a message uses: "openreg", not "privateuse1"
)


def resource_name(handle: accelctl.AcceleratorHandle) -> str:
    """Return the custom resource that counts ``handle``'s devices.

    Their torch device type (the generic PrivateUse1 plugin's ``openreg``), else the accelerator's
    name."""
    return handle.info.device_type or handle.plugin_name


def ray_resources(accelerator: Any = "auto") -> dict[str, float]:
    """Return the custom resources this node advertises to Ray for ``accelerator``'s devices.

    For ``ray.init(resources=...)`` or ``ray start --resources '<JSON>'``: ``{"npu": 8.0}``.

    :param accelerator: what :func:`accelctl.resolve` takes (``"auto"``: ``ACCELCTL_ACCELERATOR``
        when set, else the available accelerator of highest priority).
    :returns: one entry, the device count of the plugin's ``auto_device_count()``; empty for an
        accelerator that counts processes rather than devices (the CPU), whose workers Ray's
        own ``CPU`` resource already schedules.
    :raises accelctl.AccelctlError: when the accelerator is unknown or unavailable on this node
        (:func:`accelctl.resolve`'s errors).
    """
    return _advertised(accelerator)[1]


def _advertised(accelerator: Any) -> tuple[accelctl.AcceleratorHandle, dict[str, float]]:
    selection = accelctl.resolve(accelerator)
    handle = selection.accelerator
    if isinstance(selection.parsed, int):  # a process count (the CPU): nothing to advertise
        return handle, {}
    return handle, {resource_name(handle): float(handle.auto_device_count())}


@click.command("ray-resources")
@click.option(
    "--accelerator",
    "-a",
    default="auto",
    show_default=True,
    help="Accelerator name or alias (auto: ACCELCTL_ACCELERATOR, else the best available).",
)
def ray_resources_command(accelerator: str) -> None:
    """Print this node's accelctl devices as Ray's custom resources (JSON).

    For ray start --resources "$(accelctl ray-resources)"; {} where the accelerator counts processes
    (the CPU). Exits 1 with the reason when the accelerator is not usable here."""
    handle, resources = _advertised(accelerator)
    if not resources:
        click.echo(
            f"accelctl ray-resources: {known_name(handle, accelerator)} runs "
            f"processes, not devices: Ray's own CPU resource schedules its workers "
            f"(ray start --num-cpus N), so there is nothing to advertise",
            err=True,
        )
    # Whole counts as integers: what a person would type after --resources.
    click.echo(json.dumps({name: int(count) if count.is_integer() else count
                           for name, count in resources.items()}))  # fmt: skip

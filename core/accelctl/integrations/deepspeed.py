"""DeepSpeed on any accelctl accelerator, through DeepSpeed's own door ``set_accelerator``.

::

    import deepspeed
    import accelctl.integrations.deepspeed  # before deepspeed.initialize

    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

DeepSpeed runs on the devices of its own list (``DS_ACCELERATOR``: cuda, cpu, xpu, npu, ...);
importing this module makes DeepSpeed's accelerator the accelctl plugin's instead, in this
process: :func:`use_plugin` with ``"auto"`` (``ACCELCTL_ACCELERATOR`` when set, as ``accelctl
launch`` sets it, else the available accelerator of highest priority), one device per process
under a launcher (``devices[LOCAL_RANK]``). Call :func:`use_plugin` to choose otherwise. The
accelerator is a ``DeepSpeedAccelerator`` made from the plugin and torch's device-generic APIs
(:mod:`._deepspeed.accelerator`); its communication backend is the plugin's
``distributed_backend``; DeepSpeed's compiled ops the device has no build of say so when asked
for (:mod:`._deepspeed.ops`). Two things ``set_accelerator`` cannot reach are adapted, declared
in :data:`ADAPTATION` and checked by their shape: the builder names DeepSpeed's import bound to
the accelerator it found then are bound again, and on a device that is not a CPU
``deepspeed.initialize`` is wrapped to move the model before the engine names its parameters
and to refuse a set-up that cannot run (:mod:`._deepspeed.initialize`). Nothing else of
DeepSpeed is patched (docs/deepspeed.md, "What the bridge changes in DeepSpeed").
"""

from __future__ import annotations

from typing import Any

from ._deepspeed.adaptation import ADAPTATION

try:
    # Before anything of DeepSpeed: a release the bridge cannot run on is refused here.
    ADAPTATION.require()
    import deepspeed  # noqa: F401  # the framework, before anything of the bridge
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without DeepSpeed
    from ._shared.missing import framework_missing

    raise framework_missing("deepspeed", "DeepSpeed", exc) from exc

import os

import accelctl
from accelctl._choice.process_environment import ProcessEnvironment
from accelctl._contract import (
    settings as _settings,  # the same distribution: released with the core
)
from accelctl._training.processes import (
    alone_on_first_device,
    choose_device,
    launch_hint,
)

from ._deepspeed.accelerator import PluginAccelerator
from ._deepspeed.device import use_device
from ._deepspeed.ops import MissingOpError

__all__ = [
    "ACCELERATOR",
    "ADAPTATION",
    "ADAPTED",
    "MissingOpError",
    "PluginAccelerator",
    "use_plugin",
]

#: True: importing the bridge refuses a release it cannot adapt (see :data:`ADAPTATION`).
ADAPTED: bool = ADAPTATION.refusal == ""


def use_plugin(accelerator: Any = "auto", devices: Any = "auto") -> PluginAccelerator:
    """Make DeepSpeed's accelerator in this process the accelctl accelerator's.

    Call it before ``deepspeed.initialize``; returns the ``DeepSpeedAccelerator`` set.

    :param accelerator: what :func:`accelctl.resolve` takes: ``"auto"``, ``"gpu"``, a name or
        alias, or an :class:`accelctl.Accelerator` instance.
    :param devices: a devices spec of that accelerator. ``"auto"``: under a launcher,
        ``ACCELCTL_DEVICES`` when set, else one device per process the launcher started on this
        machine; in a process started alone, the first device. Process ``LOCAL_RANK`` takes
        ``devices[LOCAL_RANK]``, made current with the plugin's ``setup_device``.

    :raises accelctl.ProcessSetupError: several processes on an accelerator without a
        distributed backend or over one that cannot carry its tensors, several devices without a
        launcher, a launcher that started another number of processes than there are devices,
        devices out of order (DeepSpeed takes device ``LOCAL_RANK``), or a DeepSpeed whose
        ``DeepSpeedAccelerator`` declares methods the bridge does not implement.
    """
    env = ProcessEnvironment.from_environ(os.environ)
    automatic = isinstance(devices, str) and devices.strip().lower() == "auto"
    automatic = automatic and not _settings.SelectionVariables.read().devices
    if automatic and env.launched:
        devices = env.local_world_size  # one device per process
    selection = accelctl.resolve(accelerator, devices)
    if automatic and not env.launched:
        selection = alone_on_first_device(selection, launch_hint(selection))
    device = choose_device(selection, env=env, launch_command_line=launch_hint(selection))
    handle = selection.accelerator
    if env.launched and device.type != "cpu" and device.index != env.local_rank:
        raise accelctl.ProcessSetupError(
            f"process {env.local_rank} of this machine would run on {device}, but DeepSpeed "
            f"puts process LOCAL_RANK={env.local_rank} on device index {env.local_rank}. Launch "
            f"on the devices in order (--devices {env.local_world_size})"
        )
    return use_device(handle, device, env.local_world_size, rank=env.rank, stacklevel=3)


#: The accelerator importing this module set: ``use_plugin()``'s.
ACCELERATOR: PluginAccelerator = use_plugin()

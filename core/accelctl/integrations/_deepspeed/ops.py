"""DeepSpeed's compiled ops on an accelctl accelerator.

Which builder each op gets, and the names DeepSpeed bound to the builders of the accelerator it
found when it was imported.

- On a CPU plugin every op is DeepSpeed's own CPU build (``deepspeed.ops.op_builder.cpu``),
  as with DeepSpeed's CPU accelerator.
- Elsewhere, the ops that run on the host whatever the device (the CPU optimizers of ZeRO-Offload,
  asynchronous I/O, pinned memory) are DeepSpeed's CPU builds too, compiled on first use; every
  other op (fused Adam, Lamb, Lion, the transformer kernels, ...) has no build for the device:
  its builder says so (``is_compatible()`` is False) and loading it raises
  :class:`MissingOpError`, naming the op, what asks for it and what to use instead, never a CPU
  build run on the device's memory.

``import deepspeed`` asks the accelerator it detects for every builder once and keeps them as
names (``deepspeed.ops.op_builder.FusedAdamBuilder``, and the optimizers' modules import those
names). :func:`rebind` points them at the accelctl accelerator's builders after
``set_accelerator``, through DeepSpeed's own ``builder_closure``; the names are declared in
:data:`INTERNALS` and shape-checked (``_versions``), and :func:`restore` undoes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

import accelctl
from accelctl._deepspeed.builds import COMMUNICATION_OPS, HOST_OPS
from accelctl._deepspeed.builds import HOST_BUILDERS as HOST_BUILDERS

from .adaptation import BUILDER_NAMES, PATCHES


class OpsAccelerator(Protocol):
    """What the builders read of the bridge's ``DeepSpeedAccelerator``.

    That class is :class:`.accelerator.PluginAccelerator`, which imports this module.
    """

    handle: accelctl.AcceleratorHandle

    def device_name(self, device_index: int | None = None) -> str:
        """The device type (``"openreg"``)."""
        ...


#: What asks for a device op, and what to use instead (the ops a training config reaches).
_INSTEAD = {
    "FusedAdamBuilder": (
        'a DeepSpeed config\'s "optimizer": {"type": "Adam"} or "AdamW" (deepspeed.ops.adam.'
        "FusedAdam)",
        'set "torch_adam": true in the optimizer\'s "params" (torch\'s Adam on the device), or '
        "pass a torch optimizer: deepspeed.initialize(optimizer=torch.optim.AdamW(...))",
    ),
    "FusedLambBuilder": (
        'a DeepSpeed config\'s "optimizer": {"type": "Lamb"} (deepspeed.ops.lamb.FusedLamb)',
        "pass a torch optimizer to deepspeed.initialize(optimizer=...)",
    ),
    "FusedLionBuilder": (
        'a DeepSpeed config\'s "optimizer": {"type": "Lion"} (deepspeed.ops.lion.FusedLion)',
        "pass a torch optimizer to deepspeed.initialize(optimizer=...)",
    ),
    "ShareMemCommBuilder": (
        "DeepSpeed's shared-memory all-reduce for CPU inference (deepspeed.comm."
        "inference_all_reduce)",
        "the plugin's distributed backend carries the collectives (torch.distributed)",
    ),
    "CCLCommBuilder": (
        "DeepSpeed's oneCCL collectives for CPUs",
        "the plugin's distributed backend carries the collectives (torch.distributed)",
    ),
}

#: The module where ``import deepspeed`` binds every builder name, and its function that asks the
#: current accelerator for one; then the optimizers' modules that import a builder by name.
INTERNALS = BUILDER_NAMES


class MissingOpError(accelctl.AccelctlError, RuntimeError):
    """One of DeepSpeed's compiled ops has no build for the accelctl accelerator's device."""


def builder_class(class_name: str, accelerator: OpsAccelerator) -> type:
    """Return the builder class of ``class_name`` for ``accelerator``.

    ``class_name`` is a builder's name (``"FusedAdamBuilder"``); the rules are the module's
    docstring's.
    """
    host = importlib.import_module(HOST_BUILDERS)
    if class_name in COMMUNICATION_OPS:
        return _missing_builder(class_name, accelerator, host.NotImplementedBuilder)
    if accelerator.device_name() == "cpu" or class_name in HOST_OPS:
        found = getattr(host, class_name, None)
        if isinstance(found, type):
            return found
        if accelerator.device_name() == "cpu":
            fallback: type = host.NotImplementedBuilder  # as DeepSpeed's CPU accelerator
            return fallback
    return _missing_builder(class_name, accelerator, host.NotImplementedBuilder)


def _missing_builder(class_name: str, accelerator: OpsAccelerator, base: type) -> type:
    from accelctl._choice.selection import known_name

    shown = known_name(accelerator.handle)
    device_type = accelerator.device_name()
    asked_by, instead = _INSTEAD.get(
        class_name, ("DeepSpeed", "leave out the feature that asks for it")
    )
    message = (
        f"DeepSpeed's compiled op {class_name.removesuffix('Builder')} ({class_name}) has no "
        f"build for accelctl accelerator {shown!r} ({device_type!r} devices): DeepSpeed builds "
        f"its ops for its own list of devices, and {asked_by} asks for it. Instead: {instead}"
    )

    def is_compatible(self: Any, verbose: bool = False) -> bool:
        return False

    def load(self: Any, verbose: bool = True) -> Any:
        raise MissingOpError(message)

    # NAME stays NotImplementedBuilder's: DeepSpeed looks it up among the ops it probed
    # (deepspeed.ops.__compatible_ops__), where it is always there, and always False.
    namespace = {
        "is_compatible": is_compatible,
        "load": load,
        "jit_load": load,
        "message": message,
        "__doc__": message,
    }
    return type(f"Missing{class_name}", (base,), namespace)


def rebind() -> None:
    """Point the builder names ``import deepspeed`` bound at the current accelerator's builders.

    The bridge's patches (``integrations/_shared/patching.py``) keep the old values for
    :func:`restore`.
    """
    restore()
    builders = importlib.import_module("deepspeed.ops.op_builder")
    names = [
        name
        for name, value in vars(builders).items()
        if name.endswith("Builder")
        and name not in ("OpBuilder", "CUDAOpBuilder")
        and isinstance(value, type)
    ]
    why = "the builder of the accelctl accelerator's DeepSpeedAccelerator, not the one found first"

    def closure(name: str) -> Callable[[Any], Any]:
        return lambda _: builders.builder_closure(name)

    def bound(name: str) -> Callable[[Any], Any]:
        return lambda _: getattr(builders, name)

    for name in names:
        PATCHES.apply(builders.__name__, name, closure(name), why, declared_as="builder_closure")
    for internal in INTERNALS[1:]:
        PATCHES.apply(internal.owner, internal.name, bound(internal.name), why)


def restore() -> None:
    """Undo :func:`rebind`: DeepSpeed's names as its import bound them."""
    builder_names = [p.name for p in PATCHES.applied() if p.name.endswith("Builder")]
    if builder_names:  # (no names would undo every patch)
        PATCHES.undo(*builder_names)

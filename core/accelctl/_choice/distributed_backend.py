"""Whether torch can carry an accelerator's tensors over a ``torch.distributed`` backend.

The one check shared by ``accelctl validate`` (the conformance kit), ``accelctl launch``,
:func:`accelctl.launch`, the Trainer and the Accelerate and transformers bridges: a backend torch
does not have for the devices' type (``"nccl"`` or ``"gloo"`` on ``openreg`` devices, a made-up
``"zccl"``), whether a plugin declares it or a user names it, is refused before any process
starts where the entry point can know (a launch), else where the process is set up (a Trainer,
an ``Accelerator``, ``TrainingArguments``), before it joins a process group: naming the backend,
what is wrong with it and the backend torch has for the device, instead of failing in every rank
inside ``init_process_group`` with torch's message, which names none of them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from .._base.problem import Problem
from .._host.handle import AcceleratorHandle

#: torch's backend for tests (it carries nothing between processes): never one to advise.
_NOT_ADVISED = frozenset({"fake", "undefined"})


def backend_problem(backend: str, device_type: str) -> Problem | None:
    """Say why ``backend`` cannot carry ``device_type`` tensors here; None when it can.

    ``backend`` is ``"gloo"``, or per device ``"cpu:gloo,cuda:nccl"``. It can when registered
    and compiled in. The problem's words follow the backend's name (``"is not compiled into this
    torch build ..."``), without a fix (each reader words its own); its ``skip`` is True where this
    torch cannot tell."""
    import torch.distributed as dist

    if not dist.is_available():
        return Problem("this torch build has no torch.distributed", skip=True)
    name = backend.lower()
    if ":" in name:  # "cpu:gloo,cuda:nccl": the entry for this device type
        pairs = dict(part.split(":", 1) for part in name.split(",") if ":" in part)
        if device_type not in pairs:
            return Problem(f"names no backend for device type {device_type!r}")
        name = pairs[device_type]
    capability: dict[str, list[str]] = dist.Backend.backend_capability
    if name not in capability:
        known = ", ".join(sorted(set(capability) - _NOT_ADVISED)) or "none"
        return Problem(f"is not a torch.distributed backend this torch knows (registered: {known})")
    if device_type not in capability[name]:
        supported = ", ".join(capability[name]) or "no device type"
        return Problem(
            f"does not support {device_type!r} tensors (it is registered for {supported})"
        )
    available = getattr(dist, f"is_{name}_available", None)
    if callable(available) and not available():
        return Problem(
            f"is not compiled into this torch build (torch.distributed.is_{name}_available())"
        )
    return None


def device_backends(device_type: str) -> list[str]:
    """Return the backends that carry ``device_type`` tensors in this torch, its default first.

    ``["gloo"]`` for ``"cpu"``, ``["occl"]`` for torch_openreg's ``"openreg"``; ``[]`` when it has
    none, or no ``torch.distributed``."""
    import torch.distributed as dist

    if not dist.is_available():
        return []
    default = dist.Backend.default_device_backend_map.get(device_type)
    names = [default] if default else []
    names += sorted(set(dist.Backend.backend_capability) - {default})
    return [
        name for name in names if name not in _NOT_ADVISED and _verdict(name, device_type) is None
    ]


def _devices_own(device_type: str) -> str:
    """``torch's backend for 'openreg' devices here is 'occl'``, for a message."""
    own = device_backends(device_type)
    if not own:
        return f"torch has no backend for {device_type!r} devices here"
    if len(own) == 1:
        return f"torch's backend for {device_type!r} devices here is {own[0]!r}"
    return f"torch's backends for {device_type!r} devices here are {', '.join(map(repr, own))}"


@dataclass(frozen=True)
class Started:
    """The processes a refusal speaks of, so that it says truly what was started.

    ``launcher`` empty: none was started yet (a launch refuses before it starts any; a Trainer
    alone refuses before it suggests one). Else the launcher started ``processes`` processes
    and each refuses where it is set up, before it joins the process group.
    """

    processes: int = 0
    launcher: str = ""

    def outcome(self) -> str:
        """The sentence saying what became of the processes."""
        if not self.launcher:
            return (
                "several processes would each fail in torch.distributed.init_process_group, so "
                "none was started"
            )
        return (
            f"{self.launcher} started {self.processes} processes for this run, and each refuses "
            f"here, before it joins the process group (torch.distributed.init_process_group "
            f"would fail in each)"
        )


#: Nothing started: what a launch, or a Trainer alone, refuses with.
NOTHING_STARTED = Started()

#: What :func:`backend_problem` found, per (backend, device type): asked once per process.
_verdicts: dict[tuple[str, str], Problem | None] = {}


def _verdict(backend: str, device_type: str) -> Problem | None:
    """:func:`backend_problem`, asked once per process for each backend and device type."""
    key = (backend, device_type)
    if key not in _verdicts:
        _verdicts[key] = backend_problem(backend, device_type)
    return _verdicts[key]


def unusable_backend(
    handle: AcceleratorHandle,
    device_type: str,
    shown_name: str,
    started: Started = NOTHING_STARTED,
) -> str | None:
    """Return the sentence refusing several processes of ``handle`` for its backend, or None.

    Refused because torch cannot carry its ``device_type`` tensors over its ``distributed_backend``;
    None when it can, when torch cannot tell, or when the plugin declares no backend (its own
    refusal: one process only).

    Asked once per process for each backend and device type (a launch asks before it starts its
    processes, a Trainer before it joins their group), never per call of a step.

    :param shown_name: the accelerator as the user knows it (``openreg``, not ``privateuse1``).
    :param started: what was started already (default: nothing), for the message.
    """
    backend = handle.info.distributed_backend
    if backend is None:
        return None
    problem = _verdict(backend, device_type)
    if problem is None or problem.skip:
        return None
    declared = (
        f"accelerator {shown_name!r} (plugin {handle.plugin_name!r}, {_origin(handle)}) declares "
        f"distributed_backend={backend!r}, which {problem}; {_devices_own(device_type)}: "
        f"{started.outcome()}"
    )
    own = device_backends(device_type)
    if handle.entry_point is None:
        # No entry point: `accelctl validate <name>` cannot find it; the object is the user's.
        where = _object_named(handle)
        fix = (
            f"Set distributed_backend = {own[0]!r} in {where}"
            if own
            else f"Set the distributed_backend its torch extension registers in {where}"
        )
        return (
            f"{declared}. {fix} (`accelctl.testing.assert_conforms(<the object>)` runs the "
            f"checks `accelctl validate` runs on an installed plugin, this one included), or "
            f"train in one process (devices=1, without a launcher)"
        )
    return (
        f"{declared}. Use one device (devices=1, or --devices 1), or ask the plugin's maker to "
        f"declare the backend their torch extension registers for {device_type!r} "
        f"(`accelctl validate {handle.plugin_name}` reports the same)"
    )


def named_backend_refusal(
    backend: str,
    device_type: str,
    *,
    named_by: str,
    accelerator: str,
    leave_out: str,
    started: Started,
) -> str | None:
    """Return the sentence refusing a backend the user named for several processes, or None.

    The backend named by ``InitProcessGroupKwargs(backend=...)`` or ``ddp_backend``, for
    ``device_type`` devices, where torch cannot carry their tensors over it; None when it can, or
    cannot tell.

    :param named_by: where the user named it, as they wrote it
        (``"InitProcessGroupKwargs(backend='gloo')"``).
    :param accelerator: the accelerator as the user knows it.
    :param leave_out: how to use the accelerator's own backend instead (``"leave ddp_backend
        unset"``).
    """
    problem = _verdict(backend, device_type)
    if problem is None or problem.skip:
        return None
    own = device_backends(device_type)
    name = f"name {own[0]!r} there, or " if own else ""
    return (
        f"{named_by} names the torch.distributed backend {backend!r} for accelerator "
        f"{accelerator!r}, whose processes run on {device_type!r} devices, and {backend!r} "
        f"{problem}; {_devices_own(device_type)}: {started.outcome()}. To fix it, "
        f"{name}{leave_out}"
    )


def _origin(handle: AcceleratorHandle) -> str:
    """``accelctl-npu 1.0`` for an installed plugin, ``class MyCPU, given as an object`` else."""
    if handle.distribution:
        return f"{handle.distribution} {handle.version or ''}".strip()
    return f"{_object_named(handle)}, given as an object"


def _object_named(handle: AcceleratorHandle) -> str:
    """The plugin object as its author wrote it: ``class MyCPU``, ``module my_npu``."""
    plugin = handle.plugin
    if inspect.ismodule(plugin):
        return f"module {plugin.__name__}"
    cls = plugin if inspect.isclass(plugin) else type(plugin)
    return f"class {cls.__qualname__}"

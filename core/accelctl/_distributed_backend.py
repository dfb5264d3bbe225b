"""Whether torch can carry an accelerator's tensors over its declared ``distributed_backend``.

The one check shared by ``accelctl validate`` (the conformance kit), ``accelctl launch``,
:func:`accelctl.launch` and the Trainer: a backend torch does not have for the devices' type
(``"nccl"`` on ``openreg`` devices, a made-up ``"zccl"``) is refused before any process starts,
naming the plugin and the backend, instead of failing in every rank inside
``init_process_group`` with torch's message, which names no plugin.
"""

from __future__ import annotations

from ._plugin import AcceleratorHandle


def backend_problem(backend: str, device_type: str) -> str | None:
    """Why ``backend`` (``"gloo"``, or per device ``"cpu:gloo,cuda:nccl"``) cannot carry
    ``device_type`` tensors here: None when it can (registered, and compiled in), ``"skip: <why>"``
    when this torch cannot tell, else a phrase saying what is wrong."""
    import torch.distributed as dist

    if not dist.is_available():
        return "skip: this torch build has no torch.distributed"
    name = backend.lower()
    if ":" in name:  # "cpu:gloo,cuda:nccl": the entry for this device type
        pairs = dict(part.split(":", 1) for part in name.split(",") if ":" in part)
        if device_type not in pairs:
            return f"names no backend for device type {device_type!r}"
        name = pairs[device_type]
    capability: dict[str, list[str]] = dist.Backend.backend_capability
    if name not in capability:
        known = ", ".join(sorted(capability)) or "none"
        return f"is not a torch.distributed backend this torch knows (registered: {known})"
    if device_type not in capability[name]:
        supported = ", ".join(capability[name]) or "no device type"
        return f"does not support {device_type!r} tensors (it is registered for {supported})"
    available = getattr(dist, f"is_{name}_available", None)
    if callable(available) and not available():
        return f"is not compiled into this torch build (torch.distributed.is_{name}_available())"
    return None


#: What :func:`unusable_backend` found, per (backend, device type): asked once per process.
_verdicts: dict[tuple[str, str], str | None] = {}


def unusable_backend(handle: AcceleratorHandle, device_type: str, shown_name: str) -> str | None:
    """The sentence refusing several processes of ``handle`` because torch cannot carry its
    ``device_type`` tensors over its ``distributed_backend``; None when it can, when torch cannot
    tell, or when the plugin declares no backend (its own refusal: one process only).

    Asked once per process for each backend and device type (a launch asks before it starts its
    processes, a Trainer before it joins their group), never per call of a step.

    :param shown_name: the accelerator as the user knows it (``openreg``, not ``privateuse1``).
    """
    backend = handle.info.distributed_backend
    if backend is None:
        return None
    key = (backend, device_type)
    if key not in _verdicts:
        _verdicts[key] = backend_problem(backend, device_type)
    problem = _verdicts[key]
    if problem is None or problem.startswith("skip: "):
        return None
    plugin = (
        f"{handle.distribution} {handle.version}".strip()
        if handle.distribution
        else "given as an object"
    )
    return (
        f"accelerator {shown_name!r} (plugin {handle.name!r}, {plugin}) declares "
        f"distributed_backend={backend!r}, which {problem}: several processes on its "
        f"{device_type!r} devices would each fail in torch.distributed.init_process_group, so "
        f"none was started. Use one device (devices=1, or --devices 1), or ask the plugin's "
        f"maker to declare the backend their torch extension registers for {device_type!r} "
        f"(`accelctl validate {handle.name}` reports the same)"
    )

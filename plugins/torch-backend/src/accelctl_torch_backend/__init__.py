"""accelctl plugin for the out-of-tree backend torch has loaded as its PrivateUse1 device.

A vendor's torch backend (torch_openreg, torch_npu, ...) fills torch's PrivateUse1 slot under its
own name (``openreg``, ``npu``) and is loaded by ``import torch`` through the ``torch.backends``
entry-point group. This plugin makes such a backend an accelctl accelerator where no dedicated
plugin claims its name: canonical name ``privateuse1``, the backend's name as an alias (so
``resolve("openreg")`` and ``Trainer(accelerator="openreg")`` find it), the indexed device table,
allocator figures through ``torch.accelerator``, and the distributed backend torch has registered
for the device type, or none (one process).

Where no package declares ``torch.backends`` (the common case) ``detect()`` says no without
importing torch; see :mod:`accelctl_torch_backend.probe` for the steps. Priority 50: above the
CPU's 0, below a GPU plugin's 100; a dedicated plugin for the same device always wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import accelctl
from accelctl.torch_build import loaded_torch

from .probe import Backend, probe

if TYPE_CHECKING:
    import torch

NAME = "privateuse1"
PRIORITY = 50


@accelctl.hookimpl
def detect() -> bool:
    """True when torch has a renamed PrivateUse1 backend with devices and no dedicated plugin
    claims it."""
    return probe().available


@accelctl.hookimpl
def unavailable_reason() -> str | None:
    """No backend package, autoloading off, a backend without devices, or a dedicated plugin."""
    return probe().reason


@accelctl.hookimpl
def auto_device_count() -> int:
    """The backend's devices (``torch.<name>.device_count()``); 0 when not detected."""
    found = probe()
    return found.device_count if found.available else 0


def _name() -> str:
    """The backend's device type, for messages (the slot's name while none is loaded)."""
    return probe().name or NAME


@accelctl.hookimpl
def parse_devices(devices: Any) -> list[int]:
    """The shared indexed parser over the backend's devices: ``"auto"``, ``k``, ``"0,1"``..."""
    return accelctl.parse_indexed_devices(devices, visible=auto_device_count(), accelerator=_name())


@accelctl.hookimpl
def get_parallel_devices(devices: int | list[int]) -> list[torch.device]:
    """``<name>:i`` for each index (``openreg:0``, ...)."""
    import torch

    name = _name()
    indices = range(devices) if isinstance(devices, int) else devices
    return [torch.device(name, index) for index in indices]


def _in_use(found: Backend) -> bool:
    """True when this process already uses the backend (its module says it is initialised).

    A backend whose module cannot tell is taken as not in use: reading its allocator might
    start its runtime, which ``device_stats`` must never do.
    """
    torch = loaded_torch()
    if torch is None or found.name is None:
        return False
    is_initialized = getattr(getattr(torch, found.name, None), "is_initialized", None)
    return bool(callable(is_initialized) and is_initialized())


@accelctl.hookimpl
def device_stats(device: torch.device | str) -> dict[str, int | float]:
    """``torch.accelerator``'s allocator figures for one device, where this process already uses
    the backend (never initialised here); ``{}`` otherwise (``accelctl stats`` in a fresh process:
    an allocator's figures are per process, so there is nothing to read).

    ``device`` is a ``torch.device`` or its string (``"openreg:0"``).
    """
    found = probe()
    kind, index = accelctl.split_device(device)
    if found.name is None or kind != found.name:
        expected = found.name or "no PrivateUse1 backend is loaded"
        raise ValueError(f"{NAME}: device_stats takes a {expected} device, not {str(device)!r}")
    if not _in_use(found):
        return {}
    import torch

    accelerator = _accelerator_api(torch, found.name)
    if accelerator is None:  # torch.accelerator serves another device here
        return {}
    if index is None:
        index = int(accelerator.current_device_index())
    figures: dict[str, int | float] = {}
    readers = {
        "memory_allocated_bytes": "memory_allocated",
        "memory_reserved_bytes": "memory_reserved",
        f"{found.name}.max_memory_allocated_bytes": "max_memory_allocated",
    }
    for key, function in readers.items():
        read = getattr(accelerator, function, None)
        if read is not None:
            try:
                figures[key] = int(read(index))
            except (RuntimeError, NotImplementedError):  # the backend's allocator lacks it
                continue
    try:
        free, total = accelerator.get_memory_info(index)
    except (AttributeError, RuntimeError, NotImplementedError):  # openreg: not implemented
        pass
    else:
        figures["memory_used_bytes"] = int(total - free)
        figures["memory_total_bytes"] = int(total)
    return figures


def _accelerator_api(torch: Any, name: str) -> Any:
    """``torch.accelerator`` where it serves this backend (torch makes a registered PrivateUse1
    backend the current accelerator), else None."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    current = accelerator.current_accelerator()
    return accelerator if current is not None and current.type == name else None


@accelctl.hookimpl
def setup_device(device: torch.device) -> None:
    """Make ``device`` current: the backend module's ``set_device``, else
    ``torch.accelerator.set_device_index``."""
    import torch

    found = probe()
    index = accelctl.split_device(device)[1] or 0
    module = getattr(torch, found.name or "", None)
    if callable(getattr(module, "set_device", None)):
        module.set_device(index)
        return
    accelerator = _accelerator_api(torch, found.name or "")
    if accelerator is not None:
        accelerator.set_device_index(index)


@accelctl.hookimpl
def teardown() -> None:
    """Return the allocator's cached memory (only where the backend is in use)."""
    found = probe()
    if _in_use(found):
        import torch

        accelerator = _accelerator_api(torch, found.name or "")
        if accelerator is not None and hasattr(accelerator, "empty_cache"):
            accelerator.empty_cache()


@accelctl.hookimpl
def accelerator_info() -> accelctl.AcceleratorInfo:
    """Priority 50, the backend's name as alias and device type, the distributed backend torch
    registered for it (or none: one process)."""
    found = probe()
    if found.name is None:
        description = "out-of-tree torch backend (PrivateUse1): none loaded"
    else:
        origin = f" ({found.package})" if found.package else ""
        description = f"PrivateUse1 backend {found.name!r}{origin}"
    return accelctl.AcceleratorInfo(
        description=description,
        family=None,
        priority=PRIORITY,
        distributed_backend=found.distributed_backend,
        aliases=(found.alias,) if found.alias else (),
        device_type=found.name if found.alias else None,
    )


__all__ = [
    "accelerator_info",
    "auto_device_count",
    "detect",
    "device_stats",
    "get_parallel_devices",
    "parse_devices",
    "setup_device",
    "teardown",
    "unavailable_reason",
]

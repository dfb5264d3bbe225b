"""The allocator's figures a plugin leaves out, read from ``torch.accelerator``.

For every device type torch serves through it (CUDA, XPU, MPS, an out-of-tree PrivateUse1 backend),
the same keys.

Only where this process already uses that device: torch is imported (never imported here), the
device's type is torch's current accelerator, and its runtime says it is initialised. Elsewhere
(``accelctl stats`` in a fresh process, a device not yet used) the reading is left as it is: reading
an allocator must never start a runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._base.device_string import split_device
from .._base.torch_build import loaded_torch
from .._contract.accelerator import Accelerator

if TYPE_CHECKING:
    import torch

#: Common key -> the ``torch.accelerator`` function that reads it for one device index.
ALLOCATOR_READERS = {
    "memory_allocated_bytes": "memory_allocated",
    "memory_reserved_bytes": "memory_reserved",
    "memory_peak_allocated_bytes": "max_memory_allocated",
}


def with_torch_memory(
    stats: dict[str, int | float], device: torch.device | str
) -> dict[str, int | float]:
    """Add to ``stats`` the common memory keys it lacks, read from ``torch.accelerator``.

    The keys: allocated, reserved, peak allocated; used and total from ``get_memory_info``. Only
    where the process already uses ``device``; ``stats`` itself otherwise. A function torch or the
    backend lacks is skipped, figure by figure."""
    missing = [key for key in ALLOCATOR_READERS if key not in stats]
    device_wide = "memory_total_bytes" not in stats
    if not missing and not device_wide:
        return stats
    accelerator = _accelerator_in_use(device)
    if accelerator is None:
        return stats
    _, index = split_device(device)
    added: dict[str, int | float] = {}
    try:
        if index is None:
            index = int(accelerator.current_device_index())
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        return stats
    for key in missing:
        try:
            added[key] = int(_read(accelerator, ALLOCATOR_READERS[key])(index))
        except (AttributeError, RuntimeError, NotImplementedError, TypeError):
            continue  # this torch or backend lacks it
    if device_wide:
        try:
            free, total = accelerator.get_memory_info(index)
        except (AttributeError, RuntimeError, NotImplementedError, TypeError):
            pass
        else:
            added["memory_total_bytes"] = int(total)
            if "memory_used_bytes" not in stats:
                added["memory_used_bytes"] = int(total - free)
    return {**stats, **added} if added else stats


def _read(accelerator: Any, name: str) -> Callable[[int], Any]:
    function = getattr(accelerator, name)
    if not callable(function):
        raise AttributeError(name)
    return function  # type: ignore[no-any-return]


def _accelerator_in_use(device: torch.device | str) -> Any:
    """Return ``torch.accelerator`` where this process already uses ``device``'s type; else None.

    That is: torch is imported, ``torch.accelerator`` serves ``device``'s type, and this process
    already uses that type's runtime."""
    torch_module = loaded_torch()
    accelerator = getattr(torch_module, "accelerator", None)
    if accelerator is None:
        return None
    kind, _ = split_device(device)
    try:
        current = accelerator.current_accelerator(check_available=False)
    except (TypeError, RuntimeError):  # older signature, or a backend that cannot say
        return None
    if current is None or current.type != kind:
        return None
    return accelerator if Accelerator.torch_device_in_use(kind) else None

"""``torch.xpu`` asked only in ways that keep a later ``fork`` safe.

Starting torch's XPU runtime (SYCL over Level Zero) in a parent process breaks its forked
children: Level Zero's loader initialises once per process, so a child forked after it either
hangs or finds no driver, and torch marks such a child "in bad fork". ``torch.xpu.is_available()``
and ``device_count()`` stay clear of that only while Level Zero *Sysman* can count the devices (a
recent torch, 2.13 here, with ``pyzes`` installed, per torch's docs); otherwise they fall back to
the SYCL runtime, which initialises Level Zero. So this module never calls them in a process that
does not use XPU yet: it counts through Sysman alone (:func:`sysman_count`), and uses torch's own
count and memory figures only where torch already uses XPU (:func:`in_use`): asking then starts
nothing new.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from accelctl import Accelerator


def in_use() -> bool:
    """True when this process already started torch's XPU runtime (never starts it)."""
    return Accelerator.torch_device_in_use("xpu")


def sysman_count() -> int | None:
    """Count visible XPU devices with Level Zero Sysman, or return None.

    Visible XPU devices counted by Level Zero Sysman, without the SYCL runtime; None where
    Sysman cannot count (no ``pyzes``, an older torch without it, a sub-device
    ``ZE_AFFINITY_MASK``).

    Sysman knows what the file system does not: each tile of a multi-tile GPU is a device under
    Level Zero's default ``FLAT`` hierarchy, and integrated GPUs are left out where a discrete one
    is visible. ``torch.xpu.device_count()`` is deliberately not called here: where Sysman fails it
    falls back to the SYCL runtime.
    """
    import torch

    count_zes = getattr(torch.xpu, "_device_count_zes", None)
    if count_zes is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Sysman's failures are warnings; the count says enough
        try:
            count = int(count_zes())
        except Exception:
            return None
    return count if count >= 0 else None


def device_count() -> int:
    """``torch.xpu.device_count()``: only where XPU is already in use, or where no fork follows."""
    import torch

    return int(torch.xpu.device_count())


def memory_figures(index: int) -> dict[str, int | float]:
    """torch's allocator and the device's memory, in the common keys; where XPU is in use only."""
    torch = sys.modules["torch"]
    figures: dict[str, int | float] = {}
    readers: dict[str, Any] = {
        "memory_allocated_bytes": getattr(torch.xpu, "memory_allocated", None),
        "memory_reserved_bytes": getattr(torch.xpu, "memory_reserved", None),
        "memory_peak_allocated_bytes": getattr(torch.xpu, "max_memory_allocated", None),
    }
    for key, read in readers.items():
        if read is not None:
            try:
                figures[key] = int(read(index))
            except Exception:  # a figure this torch or driver cannot give is left out
                pass
    mem_get_info = getattr(torch.xpu, "mem_get_info", None)
    if mem_get_info is not None:
        try:
            free, total = mem_get_info(index)
        except Exception:  # older drivers cannot report free memory
            pass
        else:
            figures["memory_used_bytes"] = int(total) - int(free)
            figures["memory_total_bytes"] = int(total)
    return figures


def distributed_backend() -> str | None:
    """``"xccl"`` where this torch build has the XCCL process group for XPU, else None.

    torch lists ``xpu -> xccl`` in its default backend map on every build, so that map says
    nothing; ``torch.distributed.is_xccl_available()`` (where this torch has it) tells whether the
    ``ProcessGroupXCCL`` was compiled in.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return None
    is_xccl_available = getattr(dist, "is_xccl_available", None)
    if is_xccl_available is None or not is_xccl_available():
        return None
    return "xccl"

"""accelctl plugin for the CPU.

Always detected, one process by default, any number of processes through ``gloo``. Module-level
imports stay light (no torch, no psutil): the hooks import what they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import accelctl

if TYPE_CHECKING:
    import torch

NAME = "cpu"


@accelctl.hookimpl
def detect() -> bool:
    """The CPU is always there."""
    return True


@accelctl.hookimpl
def auto_device_count() -> int:
    """``devices="auto"`` on the CPU is one process."""
    return 1


@accelctl.hookimpl
def parse_devices(devices: Any) -> int:
    """A process count: ``"auto"`` is 1, ``k`` / ``"k"`` is k; indices are refused."""
    return accelctl.parse_process_count(devices, accelerator=NAME)


@accelctl.hookimpl
def get_parallel_devices(devices: int) -> list[torch.device]:
    """``devices`` processes, each on ``torch.device("cpu")``."""
    import torch

    return [torch.device("cpu")] * devices


@accelctl.hookimpl
def device_stats(device: torch.device | str) -> dict[str, int | float]:
    """Machine-wide CPU, memory and swap figures (psutil; never sleeps) for ``cpu`` (a
    ``torch.device`` or the string ``"cpu"``: no torch import)."""
    if accelctl.split_device(device)[0] != NAME:
        raise ValueError(f"{NAME}: device_stats takes a cpu device, not {str(device)!r}")
    import psutil

    memory = psutil.virtual_memory()
    return {
        # interval=None compares with the previous call instead of sleeping; the first call of a
        # process has no previous sample and reports 0.0.
        "cpu_percent": float(psutil.cpu_percent(interval=None)),
        "memory_used_bytes": int(memory.total - memory.available),
        "memory_total_bytes": int(memory.total),
        "swap_percent": float(psutil.swap_memory().percent),
    }


@accelctl.hookimpl
def accelerator_info() -> accelctl.AcceleratorInfo:
    """Priority 0 (the floor of ``"auto"``), ``gloo`` for several processes."""
    return accelctl.AcceleratorInfo(
        description="CPU (torch's native backend)",
        family=None,
        priority=0,
        distributed_backend="gloo",
        aliases=(),
    )

"""accelctl plugin for Intel GPUs (Arc, Data Center GPU Flex and Max, integrated Xe) through
torch's XPU build: ``torch.device("xpu", i)``, ``torch.xpu``, and ``xccl`` for several processes
where the build has it.

Detection is fork-safe and cheap: it reads the kernel's files and torch's ``version.py`` as text,
and on a machine without an Intel GPU driver, or with a torch built without XPU, never imports
torch. Where both are present it counts devices through Level Zero Sysman (or the kernel's
files), never starting torch's XPU runtime (see :mod:`accelctl_xpu.probe` and
:mod:`accelctl_xpu.runtime`). Module-level imports stay light.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import accelctl

# What ``accelctl list`` runs needs only the probe: ``runtime`` (torch.xpu, asked with care) is
# imported by the hooks that use it, and by ``accelerator_info`` only past the cheap probe.
from .probe import cheap_probe, current
from .variables import AFFINITY_VAR, SELECTOR_VAR

if TYPE_CHECKING:
    import torch

NAME = "xpu"


@accelctl.hookimpl
def detect() -> bool:
    """True when an Intel GPU driver, an XPU build of torch and at least one visible device are
    here."""
    return current().available


@accelctl.hookimpl
def unavailable_reason() -> str | None:
    """Why not: no Intel GPU driver, a torch without XPU, no Level Zero loader, a variable hiding
    every device..."""
    return current().reason


@accelctl.hookimpl
def auto_device_count() -> int:
    """Visible Intel GPUs (``ZE_AFFINITY_MASK`` and ``ONEAPI_DEVICE_SELECTOR`` honoured)."""
    return current().device_count


@accelctl.hookimpl
def parse_devices(devices: Any) -> list[int]:
    """The shared indexed parser over the visible devices: ``"auto"``, ``k``, ``"0,2"``..."""
    return accelctl.parse_indexed_devices(devices, visible=auto_device_count(), accelerator=NAME)


@accelctl.hookimpl
def get_parallel_devices(devices: int | list[int]) -> list[torch.device]:
    """``xpu:i`` for each index (or each of the first ``devices``)."""
    import torch

    indices = range(devices) if isinstance(devices, int) else devices
    return [torch.device(NAME, index) for index in indices]


@accelctl.hookimpl
def device_stats(device: torch.device | str) -> dict[str, int | float]:
    """Memory figures from ``torch.xpu`` (allocated, reserved, used, total), only where this
    process already uses XPU: reading them elsewhere would start the runtime. ``{}`` otherwise.

    ``device`` is a ``torch.device`` or a string such as ``"xpu:0"``.
    """
    import torch

    from . import runtime

    device = torch.device(device) if isinstance(device, str) else device
    if device.type != NAME:
        raise ValueError(f"{NAME}: device_stats takes an xpu device, not {str(device)!r}")
    if not runtime.in_use():
        return {}
    index = device.index if device.index is not None else int(torch.xpu.current_device())
    return runtime.memory_figures(index)


@accelctl.hookimpl
def setup_device(device: torch.device) -> None:
    """``torch.xpu.set_device(device)``: kernels and allocations of this process go there."""
    import torch

    torch.xpu.set_device(device)


@accelctl.hookimpl
def teardown() -> None:
    """Empty torch's XPU caching allocator (only where XPU is in use: never start it here)."""
    from . import runtime

    if runtime.in_use():
        sys.modules["torch"].xpu.empty_cache()


@accelctl.hookimpl
def accelerator_info() -> accelctl.AcceleratorInfo:
    """Family ``gpu``, priority 100; ``xccl`` where this torch build has XCCL, else None.

    torch is asked about XCCL only where an Intel GPU driver and an XPU build of torch are both
    present; elsewhere the accelerator is unavailable, the backend is None, and torch is not
    imported (``accelctl list`` stays fast).
    """
    backend = None
    if cheap_probe().reason is None:
        from . import runtime

        backend = runtime.distributed_backend()
    return accelctl.AcceleratorInfo(
        description="Intel GPUs through torch's XPU build (torch's xpu device)",
        family="gpu",
        priority=100,
        distributed_backend=backend,
        aliases=(),
    )


@accelctl.hookimpl
def environment_info() -> dict[str, str | int | float | bool | None]:
    """For ``accelctl env``: the Level Zero and SYCL device-selection variables that are set."""
    return {name: os.environ[name] for name in (AFFINITY_VAR, SELECTOR_VAR) if name in os.environ}


__all__ = [
    "accelerator_info",
    "auto_device_count",
    "detect",
    "device_stats",
    "environment_info",
    "get_parallel_devices",
    "parse_devices",
    "setup_device",
    "teardown",
    "unavailable_reason",
]

"""accelctl plugin for Intel GPUs through torch's XPU build.

The GPUs are Arc, Data Center GPU Flex and Max, and integrated Xe; the build gives
``torch.device("xpu", i)``, ``torch.xpu``, and ``xccl`` for several processes where it has it.

Detection is fork-safe and cheap: it reads the kernel's files and torch's ``version.py`` as text,
and on a machine without an Intel GPU driver, or with a torch built without XPU, never imports
torch. Where both are present it counts devices through Level Zero Sysman (or the kernel's
files), never starting torch's XPU runtime (see :mod:`accelctl_xpu.probe` and
:mod:`accelctl_xpu.runtime`). Module-level imports stay light.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

import accelctl

# What ``accelctl list`` runs needs only the probe: ``runtime`` (torch.xpu, asked with care) is
# imported by the hooks that use it, and by ``accelerator_info`` only past the cheap probe.
from .probe import cheap_probe, current
from .variables import DEVICE_VARIABLES

if TYPE_CHECKING:
    import torch


class XPUAccelerator(accelctl.Accelerator):
    """Intel GPUs as torch's ``xpu`` devices.

    The probe (:mod:`accelctl_xpu.probe`) answers ``detect``, ``unavailable_reason`` and
    ``auto_device_count``; devices and their specs are the base class's indexed defaults
    (``xpu:i``)."""

    name = "xpu"
    description = "Intel GPUs through torch's XPU build (torch's xpu device)"
    family = "gpu"
    priority = 100

    def detect(self) -> bool:
        """Say whether an Intel GPU driver, an XPU torch and a visible device are here.

        True when an Intel GPU driver, an XPU build of torch and at least one visible device
        are here."""
        return current().available

    def unavailable_reason(self) -> str | None:
        """Say why XPU is not available.

        No Intel GPU driver, a torch without XPU, no Level Zero loader, a variable hiding every
        device..."""
        return current().reason

    def auto_device_count(self) -> int:
        """Visible Intel GPUs (``ZE_AFFINITY_MASK`` and ``ONEAPI_DEVICE_SELECTOR`` honoured)."""
        return current().device_count

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Return memory figures from ``torch.xpu``, only where this process already uses XPU.

        The figures are allocated, reserved, used and total memory; reading them in a process
        that does not use XPU would start the runtime, so it gets ``{}``.

        ``device`` is a ``torch.device`` or a string such as ``"xpu:0"``.
        """
        import torch

        from . import runtime

        device = torch.device(device) if isinstance(device, str) else device
        if device.type != "xpu":
            raise ValueError(
                f"{self.accelerator_name}: device_stats takes an xpu device, not {str(device)!r}"
            )
        if not runtime.in_use():
            return {}
        index = device.index if device.index is not None else int(torch.xpu.current_device())
        return runtime.memory_figures(index)

    def setup_device(self, device: torch.device) -> None:
        """``torch.xpu.set_device(device)``: kernels and allocations of this process go there."""
        import torch

        torch.xpu.set_device(device)

    def teardown(self) -> None:
        """Empty torch's XPU caching allocator (only where XPU is in use: never start it here)."""
        from . import runtime

        if runtime.in_use():
            sys.modules["torch"].xpu.empty_cache()

    def accelerator_info(self) -> accelctl.AcceleratorInfo:
        """Return the class attributes, with ``xccl`` as the backend where torch has it.

        The class attributes, and ``xccl`` as the distributed backend where this torch build
        has XCCL (else None: one process).

        torch is asked about XCCL only where an Intel GPU driver and an XPU build of torch are
        both present; elsewhere the accelerator is unavailable, the backend is None, and torch is
        not imported (``accelctl list`` stays fast).
        """
        backend = None
        if cheap_probe().reason is None:
            from . import runtime

            backend = runtime.distributed_backend()
        return replace(super().accelerator_info(), distributed_backend=backend)

    def environment_info(self) -> dict[str, str | int | float | bool | None]:
        """For ``accelctl env``: the Level Zero and SYCL device-selection variables that are set."""
        return dict(self.environment_variables(DEVICE_VARIABLES))


__all__ = ["XPUAccelerator"]

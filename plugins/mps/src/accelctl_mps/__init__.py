"""accelctl plugin for Apple's MPS (Metal Performance Shaders) backend of torch.

One device (``mps:0``), one process: ``gloo`` and ``nccl`` do not run on MPS, so
``distributed_backend`` is None and the Trainer refuses several devices. Off macOS the plugin says
no without importing torch. Detection asks torch itself (``torch.backends.mps.is_built()`` and
``is_available()``), never ``platform.processor()``, which reports ``i386`` under an emulated
(Rosetta) Python and misses Intel Macs with an AMD GPU.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import accelctl

if TYPE_CHECKING:
    import torch

#: torch's MPS settings, reported by ``accelctl env`` when set.
DEVICE_VARIABLES = ("PYTORCH_ENABLE_MPS_FALLBACK", "PYTORCH_MPS_HIGH_WATERMARK_RATIO")


def _on_macos() -> bool:
    return sys.platform == "darwin"


class MPSAccelerator(accelctl.Accelerator):
    """Apple's GPU as torch's single ``mps`` device, in one process.

    There is no distributed backend; devices are the base class's default (``mps:0``).
    """

    name = "mps"
    description = "Apple GPU through Metal Performance Shaders (torch's mps device)"
    family = "gpu"
    priority = 100

    def detect(self) -> bool:
        """macOS, a torch built with MPS, and a Metal GPU that torch can use."""
        if not _on_macos() or self.installed_torch() is None:
            return False
        import torch

        return bool(torch.backends.mps.is_built() and torch.backends.mps.is_available())

    def unavailable_reason(self) -> str | None:
        """Not macOS, no torch, a torch built without MPS, or MPS not usable on this Mac."""
        if not _on_macos():
            return f"not macOS (MPS is Apple's Metal backend; this is {sys.platform})"
        if self.installed_torch() is None:
            return self.TORCH_MISSING
        import torch

        if not torch.backends.mps.is_built():
            return f"torch {torch.__version__} was built without MPS; install torch's macOS build"
        if not torch.backends.mps.is_available():
            return (
                f"torch {torch.__version__} has MPS, but no usable Metal GPU was found "
                "(macOS 12.3 or later with an Apple silicon or AMD GPU is needed)"
            )
        return None

    def auto_device_count(self) -> int:
        """1 where MPS is available, else 0."""
        return 1 if self.detect() else 0

    def parse_devices(self, devices: Any) -> list[int]:
        """Parse a devices spec for the single MPS device.

        The single-device parser: ``"auto"``, ``-1``, ``1``, ``"1"``, ``[0]``, ``"0,"`` give
        [0]."""
        return accelctl.parse_single_device(
            devices, accelerator=self.accelerator_name, visible=self.auto_device_count()
        )

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Return torch's MPS allocator figures and the unified memory.

        The allocator figures are there where this torch has them; the unified (system)
        memory, which the GPU shares with the CPU, is under the common keys.

        ``device`` is a ``torch.device`` or its string ``"mps:0"``; torch is imported here only
        where MPS is available (``detect``), as the allocator figures need it.
        """
        import psutil

        if accelctl.split_device(device)[0] != "mps":
            raise ValueError(
                f"{self.accelerator_name}: device_stats takes an mps device, not {str(device)!r}"
            )
        figures: dict[str, int | float] = {}
        if self.detect():
            import torch

            readers = {
                # Memory held by live tensors, and everything the Metal driver gave torch (cache
                # too).
                "memory_allocated_bytes": "current_allocated_memory",
                "memory_reserved_bytes": "driver_allocated_memory",
                "mps.recommended_max_memory_bytes": "recommended_max_memory",  # torch >= 2.5
            }
            for key, function in readers.items():
                read = getattr(torch.mps, function, None)
                if read is not None:
                    figures[key] = int(read())
        memory = psutil.virtual_memory()
        figures["memory_used_bytes"] = int(memory.total - memory.available)
        figures["memory_total_bytes"] = int(memory.total)
        return figures

    def kernel_gaps(self) -> accelctl.KernelGaps:
        """Return torch's own switch for the operators MPS lacks.

        ``PYTORCH_ENABLE_MPS_FALLBACK``, which ``ACCELCTL_CPU_FALLBACK=1`` sets for the processes
        ``accelctl launch`` starts (torch reads it when it is imported). The operators themselves
        are torch's to list: its error names each one."""
        return accelctl.KernelGaps(
            fallback_variable="PYTORCH_ENABLE_MPS_FALLBACK",
            note="torch's MPS backend runs its missing operators on the CPU with its own switch",
        )

    def teardown(self) -> None:
        """Return torch's cached MPS memory to the system."""
        if self.detect():
            import torch

            torch.mps.empty_cache()

    def environment_info(self) -> dict[str, str | int | float | bool | None]:
        """Report macOS's version and torch's MPS variables for ``accelctl env``.

        MacOS's version (on macOS) and torch's MPS variables that are set; no torch import."""
        facts: dict[str, str | int | float | bool | None] = {}
        if _on_macos():
            import platform

            facts["macos"] = platform.mac_ver()[0] or None
        facts.update(self.environment_variables(DEVICE_VARIABLES))
        return facts


__all__ = ["DEVICE_VARIABLES", "MPSAccelerator"]

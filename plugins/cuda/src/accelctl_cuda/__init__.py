"""accelctl plugin for NVIDIA CUDA GPUs, and AMD GPUs through torch's ROCm (HIP) build.

torch's HIP build reports AMD GPUs as ``cuda`` devices, so one plugin serves both vendors:
``torch.device("cuda", i)``, ``torch.cuda`` and ``nccl`` (RCCL on ROCm) work the same on each.

Detection is fork-safe and cheap: it reads driver files, NVML (NVIDIA) or the KFD topology (AMD)
and torch's ``version.py`` as text, never creating a CUDA context and, on a machine without a GPU,
never importing torch or NVML (see :mod:`accelctl_cuda.probe`). Module-level imports stay light.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

import accelctl

# What ``accelctl list`` runs needs only these light modules; ``visible`` (the variables' parsing
# and the GPU records) is imported in the hooks that run once a GPU was found.
from . import amd, nvml, peaks
from .probe import Probe, current
from .variables import DEVICE_VARIABLES

if TYPE_CHECKING:
    import torch


class CUDAAccelerator(accelctl.Accelerator):
    """NVIDIA and AMD GPUs as torch's ``cuda`` devices.

    The probe (:mod:`accelctl_cuda.probe`) answers ``detect``, ``unavailable_reason`` and
    ``auto_device_count``; devices and their specs are the base class's indexed defaults
    (``cuda:i``)."""

    name = "cuda"
    description = "NVIDIA CUDA and AMD ROCm GPUs (torch's cuda device)"
    family = "gpu"
    priority = 100
    distributed_backend = "nccl"

    def detect(self) -> bool:
        """True when torch's build matches the GPUs here and at least one of them is visible."""
        return current().available

    def unavailable_reason(self) -> str | None:
        """Why not: no driver, a CPU-only torch, a variable hiding every GPU, an old driver..."""
        return current().reason

    def auto_device_count(self) -> int:
        """Count the visible GPUs.

        ``CUDA_VISIBLE_DEVICES`` (ROCm: ``ROCR_``/``HIP_VISIBLE_DEVICES``) honoured."""
        return current().device_count

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Return the allocator's figures, then the device's own.

        Allocator figures (only where this process already uses CUDA: never initialised
        here), then the device's own from NVML (NVIDIA) or the amdgpu files (AMD).

        ``device`` is a ``torch.device`` or its string (``"cuda:0"``): ``accelctl stats`` passes
        the string and imports no torch, and neither does this hook where CUDA is not in use.
        """
        kind, given_index = accelctl.split_device(device)
        if kind != "cuda":
            raise ValueError(
                f"{self.accelerator_name}: device_stats takes a cuda device, not {str(device)!r}"
            )
        in_use = self.torch_device_in_use("cuda")
        if given_index is not None:
            index = given_index
        else:
            index = int(sys.modules["torch"].cuda.current_device()) if in_use else 0
        figures: dict[str, int | float] = _allocator_figures(index) if in_use else {}
        found = current()
        if not found.available or index >= len(found.visible):
            return figures
        try:
            if found.vendor == "nvidia":
                figures.update(_nvidia_figures(found, index, in_use))
            else:
                physical = found.visible[index]
                gpus = amd.gpus()
                if isinstance(physical, int) and physical < len(gpus):
                    figures.update(amd.device_figures(gpus[physical]))
        except nvml.NvmlUnavailable:
            pass
        return figures

    def device_peak(self, device: torch.device | str) -> accelctl.DevicePeak | None:
        """Return the datasheet peak of an NVIDIA GPU that the table knows, or None.

        The table is :mod:`accelctl_cuda.peaks`, looked up by the device's name (torch's where
        CUDA is in use, else NVML's: no CUDA context). Other GPUs, MIG instances and AMD GPUs
        get None (unknown).
        """
        kind, given_index = accelctl.split_device(device)
        if kind != "cuda":
            raise ValueError(
                f"{self.accelerator_name}: device_peak takes a cuda device, not {str(device)!r}"
            )
        found = current()
        index = given_index or 0
        if not found.available or found.vendor != "nvidia" or index >= len(found.visible):
            return None
        from .visible import VisibleGpu

        gpu = found.visible[index]
        if not isinstance(gpu, VisibleGpu) or gpu.mig_uuid is not None:
            return None  # a MIG instance has a fraction of the GPU's units
        if self.torch_device_in_use("cuda"):
            name = str(sys.modules["torch"].cuda.get_device_name(index))
        else:
            try:
                pynvml = nvml.load()
                name = nvml.text(pynvml.nvmlDeviceGetName(nvml.handle_of(pynvml, gpu)))
            except Exception:  # NvmlUnavailable, or NVML's own error: the name is unknown
                return None
        return peaks.peak_of(name)

    def setup_device(self, device: torch.device) -> None:
        """``torch.cuda.set_device(device)``: kernels and allocations of this process go there."""
        import torch

        torch.cuda.set_device(device)

    def teardown(self) -> None:
        """Empty torch's caching allocator (only where CUDA is in use: never initialise it here)."""
        if self.torch_device_in_use("cuda"):
            sys.modules["torch"].cuda.empty_cache()

    def accelerator_info(self) -> accelctl.AcceleratorInfo:
        """The class attributes, and the alias ``rocm`` where AMD GPUs or a ROCm torch are.

        ``rocm`` is an alias only on AMD machines (``/dev/kfd``) or with a ROCm build of torch:
        there it names this plugin (torch calls AMD GPUs ``cuda``); on an NVIDIA machine it would
        select NVIDIA GPUs under an AMD name, so it is left unclaimed.
        """
        kfd = amd.kfd_present()
        build = self.installed_torch() if not kfd else None
        amd_here = kfd or (build is not None and build.kind == "hip")
        return replace(super().accelerator_info(), aliases=("rocm",) if amd_here else ())

    def environment_info(self) -> dict[str, str | int | float | bool | None]:
        """Report drivers and variables for ``accelctl env``.

        The NVIDIA driver and the newest CUDA version it supports (NVML, only where a driver's files
        are), the ``amdgpu`` module's version, and the visible-device variables that are set. No
        torch import, no CUDA context."""
        facts: dict[str, str | int | float | bool | None] = {}
        if nvml.driver_files_present():
            try:
                versions = nvml.driver_versions(nvml.load())
            except nvml.NvmlUnavailable as exc:  # a driver's files but no NVML: that is the fact
                facts["nvml"] = str(exc)
            else:
                facts["nvidia_driver"] = versions.driver
                facts["cuda_driver_api"] = versions.cuda_text
        amd_driver = amd.driver_version()
        if amd_driver is not None or amd.kfd_present():
            facts["amdgpu_driver"] = amd_driver
        facts.update(self.environment_variables(DEVICE_VARIABLES))
        return facts


def _allocator_figures(index: int) -> dict[str, int | float]:
    import torch

    stats = torch.cuda.memory_stats(index)
    return {
        "memory_allocated_bytes": int(torch.cuda.memory_allocated(index)),
        "memory_reserved_bytes": int(torch.cuda.memory_reserved(index)),
        "memory_peak_allocated_bytes": int(torch.cuda.max_memory_allocated(index)),
        "cuda.num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "cuda.num_ooms": int(stats.get("num_ooms", 0)),
    }


def _nvidia_figures(found: Probe, index: int, in_use: bool) -> dict[str, int | float]:
    from .visible import VisibleGpu

    pynvml = nvml.load()
    handle = None
    if in_use:
        # torch knows the device's UUID, which names it exactly whatever CUDA_DEVICE_ORDER says.
        import torch

        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            except Exception:
                handle = None
    if handle is None:
        gpu = found.visible[index]
        assert isinstance(gpu, VisibleGpu)
        handle = nvml.handle_of(pynvml, gpu)
    return nvml.device_figures(pynvml, handle)


__all__ = ["DEVICE_VARIABLES", "CUDAAccelerator"]

"""One look at the machine: GPUs present, torch's build, devices visible, and why not if not.

The steps go from cheap to dear and stop at the first "no", so that a machine without a GPU
answers from a few ``stat`` calls (no torch, no NVML):

1. not macOS (CUDA and ROCm do not run there);
2. an NVIDIA driver's files (then NVML) or AMD's ``/dev/kfd`` (then the KFD topology);
3. torch's build, read from ``torch/version.py`` as text: CPU-only, or built for the other
   vendor, is unavailable with a reason;
4. the GPUs NVML (or the KFD topology) lists, filtered by the visible-device variables;
5. NVIDIA: a driver too old for torch's CUDA major version.

No step creates a CUDA context, so a ``fork`` after the probe stays safe.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from accelctl import Accelerator
from accelctl.torch_build import TorchBuild

# Step 2 needs only the light ``nvml`` and ``amd``; ``visible`` (step 4, with its regex and GPU
# records) is imported inside the steps after it, so a machine without a GPU never loads it.
from . import amd, nvml
from .variables import CUDA_VAR, DEVICE_VARIABLES, HIP_VAR, ROCR_VAR


@dataclass(frozen=True)
class Probe:
    """What the plugin knows about this machine; ``reason`` is None when torch can use a GPU."""

    vendor: str | None = None  # "nvidia", "amd" or None
    torch: TorchBuild | None = None
    #: NVIDIA: the :class:`~accelctl_cuda.visible.VisibleGpu` of each cuda index; AMD: the
    #: physical (KFD) index of each cuda index, None where unknown.
    visible: tuple[object, ...] = field(default=())
    driver: nvml.DriverVersions | None = None
    reason: str | None = None

    @property
    def available(self) -> bool:
        """True when torch can run work on at least one visible GPU."""
        return self.reason is None and bool(self.visible)

    @property
    def device_count(self) -> int:
        """Devices ``torch.cuda`` will see; 0 when unavailable."""
        return len(self.visible) if self.available else 0


_current = Accelerator.once_per_environment(DEVICE_VARIABLES, lambda: probe())


def current() -> Probe:
    """Return this process's probe, made once per setting of the visibility variables.

    ``detect``, ``auto_device_count``, ``unavailable_reason`` and ``device_stats`` then look
    (and initialise NVML) once.
    """
    return _current()


def forget() -> None:
    """Look again at the next :func:`current` (tests; a driver installed meanwhile)."""
    _current.forget()


def probe(environ: Mapping[str, str] | None = None) -> Probe:
    """Look at the machine (see the module's docstring for the steps)."""
    environ = os.environ if environ is None else environ
    if sys.platform == "darwin":
        return Probe(reason="CUDA and ROCm do not run on macOS (Apple GPUs: the mps accelerator)")
    nvidia_files, kfd = nvml.driver_files_present(), amd.kfd_present()
    if not nvidia_files and not kfd:
        return Probe(reason="no NVIDIA or AMD GPU driver found")
    build = Accelerator.installed_torch()
    if build is None:
        return Probe(reason=Accelerator.TORCH_MISSING)
    if build.kind == "hip" and kfd:
        return _probe_amd(build, environ)
    if nvidia_files and build.kind != "hip":
        return _probe_nvidia(build, environ)
    if build.kind == "hip":
        return Probe(
            torch=build,
            reason=f"{build.describe()} is a ROCm (HIP) build, but no AMD GPU driver is loaded "
            "(/dev/kfd is missing); install a CUDA build of torch for NVIDIA GPUs",
        )
    return Probe(
        torch=build,
        vendor="amd",
        reason=f"{build.describe()} is a "
        + ("CUDA build" if build.kind == "cuda" else "CPU-only build")
        + ", but this machine has an AMD GPU driver; install a ROCm build of torch",
    )


def _cpu_only(build: TorchBuild, vendor: str) -> str | None:
    if build.kind != "cpu":
        return None
    wanted = "CUDA" if vendor == "nvidia" else "ROCm"
    return (
        f"{build.describe()} is a CPU-only build; install a {wanted} build of torch "
        "(https://pytorch.org/get-started/locally/)"
    )


def _probe_nvidia(build: TorchBuild, environ: Mapping[str, str]) -> Probe:
    from .visible import visible_nvidia

    try:
        pynvml = nvml.load()
    except nvml.NvmlUnavailable as exc:
        return Probe(torch=build, reason=f"NVIDIA driver files exist, but {exc}")
    try:
        gpus = nvml.physical_gpus(pynvml)
    except Exception as exc:  # an NVML error while listing: say so, never raise from detect
        return Probe(torch=build, reason=f"NVML could not list the GPUs: {exc}")
    driver = nvml.driver_versions(pynvml)
    base = Probe(vendor="nvidia", torch=build, driver=driver)
    if not gpus:
        return _replace(base, reason="the NVIDIA driver reports no GPU")
    cpu_only = _cpu_only(build, "nvidia")
    if cpu_only:
        return _replace(base, reason=cpu_only)
    visible = visible_nvidia(gpus, environ)
    if not visible:
        setting = Accelerator.describe_variables([CUDA_VAR], environ)
        return _replace(base, reason=f"{setting} hides every GPU ({len(gpus)} installed)")
    wanted = build.cuda_major
    if driver.cuda is not None and wanted is not None and driver.cuda[0] < wanted:
        return _replace(
            base,
            visible=visible,
            reason=f"the NVIDIA driver {driver.driver or ''} supports CUDA up to "
            f"{driver.cuda_text}, but {build.describe()} needs CUDA {build.cuda}; "
            "update the driver or install a torch built for an older CUDA",
        )
    return _replace(base, visible=visible)


def _probe_amd(build: TorchBuild, environ: Mapping[str, str]) -> Probe:
    from .visible import visible_amd

    found = amd.gpus()
    base = Probe(vendor="amd", torch=build)
    if not found:
        return _replace(base, reason="/dev/kfd exists, but the KFD topology lists no AMD GPU")
    visible = visible_amd(len(found), environ)
    if not visible:
        setting = Accelerator.describe_variables([ROCR_VAR, HIP_VAR, CUDA_VAR], environ)
        return _replace(base, reason=f"{setting} hides every GPU ({len(found)} installed)")
    return _replace(base, visible=visible)


def _replace(base: Probe, **changes: object) -> Probe:
    from dataclasses import replace

    return replace(base, **changes)  # type: ignore[arg-type]

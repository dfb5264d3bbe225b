"""NVIDIA GPUs through NVML (``nvidia-ml-py``): presence, count, UUIDs, driver and figures.

NVML talks to the driver without creating a CUDA context, so a process that used it can still
``fork`` children that use CUDA. ``pynvml`` is imported inside the functions, and only after a cheap
look for the driver's device files says an NVIDIA driver may be there. NVML is initialised once per
process and never shut down (``nvmlInit`` is reference-counted; shutting down would make the next
query pay the full initialisation again).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

# Every ``accelctl list`` imports this module for :func:`driver_files_present`; the GPU records
# of ``visible`` (frozen dataclasses, dear to create), which only a machine with a driver uses,
# are imported inside the functions that make them.
if TYPE_CHECKING:
    from .visible import PhysicalGpu, VisibleGpu

#: Root of the file system where driver files are looked for (tests point it at a fake tree).
ROOT = Path("/")

#: Files whose presence says an NVIDIA driver is loaded: Linux device nodes and the driver's
#: proc entry, or WSL2's GPU paravirtualisation device.
DRIVER_FILES = ("dev/nvidiactl", "dev/nvidia0", "proc/driver/nvidia/version", "dev/dxg")


def driver_files_present() -> bool:
    """Cheap first look (no import): could an NVIDIA driver be here?

    On Windows there are no such files, so NVML itself is asked; on macOS CUDA does not run.
    """
    if sys.platform == "darwin":
        return False
    if sys.platform.startswith("win"):
        return True
    return any((ROOT / name).exists() for name in DRIVER_FILES)


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why, for ``unavailable_reason``."""


_initialised: ModuleType | None = None


def load() -> ModuleType:
    """Return ``pynvml``, initialised once per process.

    Once, because ``nvmlInit`` counts its calls: each would need its own ``nvmlShutdown``.

    :raises NvmlUnavailable: when nvidia-ml-py is not installed or NVML fails to initialise (no
        driver, or a driver/library mismatch).
    """
    global _initialised
    if _initialised is not None and sys.modules.get("pynvml") is _initialised:
        return _initialised
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and its many subclasses, or OSError
        raise NvmlUnavailable(f"NVML failed to initialise: {exc}") from exc
    _initialised = pynvml
    return pynvml


def text(value: Any) -> str:
    """NVML's strings: ``bytes`` in older nvidia-ml-py releases, ``str`` in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def physical_gpus(pynvml: ModuleType) -> list[PhysicalGpu]:
    """Every NVIDIA GPU, in NVML's (PCI bus) order, with its UUID and MIG instance UUIDs."""
    from .visible import PhysicalGpu

    gpus = []
    for index in range(int(pynvml.nvmlDeviceGetCount())):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = text(pynvml.nvmlDeviceGetUUID(handle))
        gpus.append(
            PhysicalGpu(index=index, uuid=uuid, mig_uuids=tuple(_mig_uuids(pynvml, handle)))
        )
    return gpus


def _mig_uuids(pynvml: ModuleType, handle: Any) -> list[str]:
    """UUIDs of the MIG instances of one GPU; empty when MIG is off or unsupported."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        if not current:
            return []
        slots = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except Exception:  # NVML_ERROR_NOT_SUPPORTED on GPUs without MIG
        return []
    uuids = []
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            uuids.append(text(pynvml.nvmlDeviceGetUUID(mig)))
        except Exception:  # an empty slot
            continue
    return uuids


class DriverVersions(NamedTuple):
    """The NVIDIA driver's version and the newest CUDA version it supports."""

    driver: str | None
    #: ``(major, minor)`` from ``nvmlSystemGetCudaDriverVersion`` (12040 -> (12, 4)).
    cuda: tuple[int, int] | None

    @property
    def cuda_text(self) -> str | None:
        """``"12.4"``, or None."""
        return None if self.cuda is None else f"{self.cuda[0]}.{self.cuda[1]}"


def driver_versions(pynvml: ModuleType) -> DriverVersions:
    """What NVML says about the driver; parts it cannot read are None."""
    driver = _try(lambda: text(pynvml.nvmlSystemGetDriverVersion()))
    raw = _try(lambda: int(pynvml.nvmlSystemGetCudaDriverVersion()))
    cuda = None if raw is None else (raw // 1000, (raw % 1000) // 10)
    return DriverVersions(driver=driver, cuda=cuda)


def _try(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # NVML_ERROR_NOT_SUPPORTED and friends: the figure is simply absent
        return None


def handle_of(pynvml: ModuleType, gpu: VisibleGpu) -> Any:
    """NVML's handle on a visible device (the MIG instance's own handle for a MIG device)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(gpu.physical_index)
    if gpu.mig_uuid is None:
        return handle
    return pynvml.nvmlDeviceGetHandleByUUID(gpu.mig_uuid)


#: NVML's code for a query the device does not support (a MIG instance's utilisation).
NOT_SUPPORTED = 3


class _Unreadable:
    """A query the device supports that failed this time: its figures are NaN, not absent."""


def _figure(pynvml: ModuleType, read: Callable[[], Any]) -> Any:
    """Return what ``read`` returns, None where unsupported, or an unreadable marker.

    None where the device does not support it (the figure is left out: not supported);
    :class:`_Unreadable` where NVML failed otherwise (NaN: not available now)."""
    try:
        return read()
    except Exception as exc:
        nvml_error = getattr(pynvml, "NVMLError", None)
        if not (isinstance(nvml_error, type) and isinstance(exc, nvml_error)):
            return None
        code = getattr(exc, "value", None)
        if code == getattr(pynvml, "NVML_ERROR_NOT_SUPPORTED", NOT_SUPPORTED):
            return None
        return None if "not supported" in str(exc).lower() else _Unreadable()


def device_figures(pynvml: ModuleType, handle: Any) -> dict[str, int | float]:
    """Read memory, utilisation, temperature, power and SM clock of one device.

    Memory, utilisation, temperature, power and SM clock of one device, under the vocabulary's
    keys (:mod:`accelctl.stats_keys`); a figure NVML does not support for it (a MIG instance has
    no utilisation, some boards no power sensor) is left out, one it failed to read this time is
    NaN."""
    figures: dict[str, int | float] = {}

    def put(
        keys: tuple[str, ...], read: Callable[[], Any], convert: Callable[[Any], tuple[float, ...]]
    ) -> None:
        value = _figure(pynvml, read)
        if isinstance(value, _Unreadable):
            figures.update(dict.fromkeys(keys, float("nan")))
        elif value is not None:
            figures.update(zip(keys, convert(value), strict=True))

    put(
        ("memory_used_bytes", "memory_total_bytes"),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(handle),
        lambda memory: (int(memory.used), int(memory.total)),
    )
    put(
        ("utilization_percent", "cuda.memory_busy_percent"),
        lambda: pynvml.nvmlDeviceGetUtilizationRates(handle),
        lambda rates: (float(rates.gpu), float(rates.memory)),
    )
    put(
        ("temperature_celsius",),
        lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        lambda celsius: (float(celsius),),
    )
    put(
        ("power_watts",),
        lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
        lambda milliwatts: (milliwatts / 1000.0,),
    )
    put(
        ("cuda.power_limit_watts",),
        lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle),
        lambda milliwatts: (milliwatts / 1000.0,),
    )
    put(
        ("cuda.sm_clock_hz",),
        lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        lambda mhz: (int(mhz) * 1_000_000,),
    )
    return figures

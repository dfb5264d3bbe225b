"""AMD GPUs through the kernel's files (Linux), for torch's ROCm (HIP) build: no library needed.

The ROCm runtime enumerates the GPU nodes of the KFD topology (``/sys/class/kfd/kfd/topology/
nodes/N/properties``: a node with ``simd_count`` above 0 is a GPU; CPU nodes have none), in node
order. Each GPU's ``drm_render_minor`` leads to its ``amdgpu`` files in ``/sys/class/drm``, which
hold its memory, busy percentage, temperature and power.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

#: Root of the file system (tests point it at a fake tree).
ROOT = Path("/")


class AmdGpu(NamedTuple):
    """One AMD GPU of the KFD topology."""

    node: int
    render_minor: int | None


def kfd_present() -> bool:
    """The ROCm kernel driver's device file exists (cheap, no import)."""
    return (ROOT / "dev/kfd").exists()


def _properties(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return values
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def gpus() -> list[AmdGpu]:
    """The AMD GPUs in ROCm's order (KFD nodes with compute units)."""
    nodes = ROOT / "sys/class/kfd/kfd/topology/nodes"
    found = []
    try:
        folders = sorted(
            (p for p in nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        )
    except OSError:
        return []
    for folder in folders:
        props = _properties(folder / "properties")
        if props.get("simd_count", 0) > 0:
            found.append(AmdGpu(node=int(folder.name), render_minor=props.get("drm_render_minor")))
    return found


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def device_figures(gpu: AmdGpu) -> dict[str, int | float]:
    """Read memory, busy percentage, temperature and power of one GPU.

    Memory (VRAM), busy percentage, temperature and power of one GPU; absent files are
    skipped."""
    if gpu.render_minor is None:
        return {}
    device = ROOT / f"sys/class/drm/renderD{gpu.render_minor}/device"
    figures: dict[str, int | float] = {}
    used, total = (
        _read_int(device / name) for name in ("mem_info_vram_used", "mem_info_vram_total")
    )
    if used is not None and total is not None:
        figures["memory_used_bytes"] = used
        figures["memory_total_bytes"] = total
    busy = _read_int(device / "gpu_busy_percent")
    if busy is not None:
        figures["utilization_percent"] = float(busy)
    for hwmon in sorted((device / "hwmon").glob("hwmon*")):
        temperature = _read_int(hwmon / "temp1_input")  # millidegrees
        if temperature is not None:
            figures["temperature_celsius"] = temperature / 1000.0
        power = _read_int(hwmon / "power1_average")
        if power is None:
            power = _read_int(hwmon / "power1_input")
        if power is not None:  # microwatts
            figures["power_watts"] = power / 1_000_000.0
        break
    return figures


def driver_version() -> str | None:
    """The amdgpu kernel module's version where the driver publishes one (DKMS builds do)."""
    try:
        return (ROOT / "sys/module/amdgpu/version").read_text().strip() or None
    except OSError:
        return None

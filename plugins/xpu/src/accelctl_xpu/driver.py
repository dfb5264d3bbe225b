"""Intel's GPU driver stack as the file system shows it: no library is loaded, nothing imported.

Two parts must be there before torch can use an Intel GPU on Linux:

- a kernel driver bound to an Intel GPU: ``/sys/class/drm/cardN/device`` with ``vendor``
  ``0x8086`` and a ``driver`` link to ``i915`` or ``xe`` (the two kernel drivers of Intel GPUs);
- the Level Zero loader (``libze_loader.so.1``), through which torch's SYCL runtime reaches it.

The cards are counted in the kernel's (PCI) order. That count is the physical device count as a
machine without Level Zero Sysman sees it: a multi-tile GPU (Data Center GPU Max) counts once
here, while Level Zero's default ``FLAT`` hierarchy shows each tile as a device.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

#: Root of the file system where driver files are looked for (tests point it at a fake tree).
ROOT = Path("/")

#: PCI vendor id of Intel.
INTEL_VENDOR = "0x8086"
#: Kernel drivers of Intel GPUs: ``i915`` (up to Alchemist / Max) and ``xe`` (Lunar Lake and on).
KERNEL_DRIVERS = ("i915", "xe")
#: The Level Zero loader's file name (its ABI version 1).
LOADER = "libze_loader.so.1"
#: Library folders searched for the loader, below :data:`ROOT`.
LIBRARY_FOLDERS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/lib",
    "usr/local/lib64",
    "opt/intel/oneapi/redist/lib",
)


#: The last resort for finding the loader (``ldconfig``'s cache); tests replace it.
def find_library(name: str) -> str | None:
    """Call ``ctypes.util.find_library``, importing ctypes only when needed.

    ``ctypes.util.find_library`` (ldconfig's cache), imported only on a machine with an Intel
    GPU: ctypes is not on the path of a machine without one."""
    import ctypes.util

    return ctypes.util.find_library(name)


_CARD = re.compile(r"^card(\d+)$")


class IntelGpu(NamedTuple):
    """One Intel GPU the kernel drives: ``/sys/class/drm/card<card>``."""

    card: int
    #: ``"i915"`` or ``"xe"``.
    driver: str


def intel_gpus() -> list[IntelGpu]:
    """Intel GPUs bound to an Intel kernel driver, in card order (connectors are skipped)."""
    drm = ROOT / "sys/class/drm"
    try:
        entries = list(drm.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _CARD.match(entry.name)
        if match is None:
            continue
        device = entry / "device"
        try:
            vendor = (device / "vendor").read_text().strip().lower()
        except OSError:
            continue
        # The driver link's target folder names the driver (.../bus/pci/drivers/i915).
        driver = Path(os.path.realpath(device / "driver")).name
        if vendor == INTEL_VENDOR and driver in KERNEL_DRIVERS:
            found.append(IntelGpu(card=int(match.group(1)), driver=driver))
    return sorted(found, key=lambda gpu: gpu.card)


def render_nodes() -> list[str]:
    """``/dev/dri/renderD*`` nodes: a process needs one (and access to it) to run GPU work."""
    try:
        return sorted(p.name for p in (ROOT / "dev/dri").glob("renderD*"))
    except OSError:
        return []


def find_loader(environ: Mapping[str, str], extra_folders: Iterable[Path] = ()) -> str | None:
    """Find the Level Zero loader, or return None.

    Where the Level Zero loader is, or None: ``LD_LIBRARY_PATH``, torch's own ``lib`` folder
    and the usual library folders first (a few ``stat`` calls), ``ldconfig``'s cache last."""
    folders = [Path(p) for p in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    folders += list(extra_folders)
    folders += [ROOT / folder for folder in LIBRARY_FOLDERS]
    for folder in folders:
        if (folder / LOADER).exists():
            return str(folder / LOADER)
    return find_library("ze_loader")

"""What the figures were measured on: CPU, cores, memory, OS, Python and the packages that matter.

Read without importing torch (versions come from package metadata).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: Distributions whose versions go into the results.
PACKAGES = ("accelctl", "accelctl-cpu", "torch", "pluggy", "click", "lightning", "matplotlib")


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "unknown"


def _memory_gib() -> float | None:
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    return None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def describe_machine() -> dict[str, Any]:
    """CPU model, logical cores (and those this process may use), memory, OS, Python, packages."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": {name: _version(name) for name in PACKAGES},
    }

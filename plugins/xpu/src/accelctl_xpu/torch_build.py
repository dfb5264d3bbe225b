"""Whether the installed torch was built for Intel GPUs (XPU), told without importing torch.

torch's build writes ``torch/version.py`` as plain literal assignments; a recent torch records
the SYCL compiler an XPU build used (``xpu: Optional[str] = '20250101'``) and ``None`` on every
other build (``xpu: Optional[str] = None`` on ``2.13.0+cpu``). The file is read as text and parsed
with :mod:`ast`, never executed. An older torch has no ``xpu`` line at all: that is read as "not
an XPU build" too. Where torch is already imported,
``torch.version`` is read instead; where the file cannot be read, torch is imported as a last
resort.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelctl.torch_build import version_literals


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: its version and, on an XPU build, its SYCL compiler version."""

    version: str
    #: ``torch.version.xpu`` of an XPU build (the SYCL compiler's version), else None.
    xpu: str | None = None
    #: How it was told: ``"loaded"`` (torch was imported), ``"version.py"`` or ``"import"``.
    source: str = "version.py"

    @property
    def has_xpu(self) -> bool:
        """True for a torch built with XPU (Intel GPU) support."""
        return bool(self.xpu)

    def describe(self) -> str:
        """``"torch 2.13.0+cpu"``, the subject of reasons."""
        return f"torch {self.version}"


def read_version_file(path: Path) -> TorchBuild | None:
    """Parse a ``torch/version.py`` without executing it; None when it is missing or unusual."""
    found = version_literals(path)
    if found is None:
        return None
    version, xpu = found.get("__version__"), found.get("xpu")
    if not isinstance(version, str):
        return None
    return TorchBuild(version=version, xpu=xpu if isinstance(xpu, str) else None)


def _from_module(torch_version: Any, source: str) -> TorchBuild:
    xpu = getattr(torch_version, "xpu", None)
    return TorchBuild(
        version=str(getattr(torch_version, "__version__", "?")),
        xpu=xpu if isinstance(xpu, str) else None,
        source=source,
    )


def torch_build() -> TorchBuild | None:
    """The installed torch's build, or None when torch is not installed.

    Order: ``torch.version`` when torch is already imported (free, and authoritative); else
    ``torch/version.py`` found through :func:`importlib.util.find_spec` and read as text; else
    ``import torch``.
    """
    loaded = sys.modules.get("torch")
    if loaded is not None and getattr(loaded, "version", None) is not None:
        return _from_module(loaded.version, "loaded")
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        build = read_version_file(Path(folder) / "version.py")
        if build is not None:
            return build
    try:
        import torch
    except Exception:  # a broken torch install: say "not installed" rather than crash detect
        return None
    return _from_module(torch.version, "import")


def torch_lib_folders() -> list[Path]:
    """``torch/lib`` of the installed torch, found without importing it (libraries ship there)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return [Path(folder) / "lib" for folder in spec.submodule_search_locations or ()]

"""Which build of torch is installed (CUDA, ROCm/HIP or CPU-only), told without importing torch.

``import torch`` takes seconds; the answer is written in ``torch/version.py``, a small module that
torch's build generates with plain literal assignments (``__version__ = '2.13.0+cpu'``,
``cuda = None``, ``hip = None``). It is read here as text and parsed with :mod:`ast`, never
executed. Where torch is already imported its ``torch.version`` is read instead, and where the file
cannot be read torch is imported as a last resort.
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
    """The installed torch: its version and the GPU runtime it was compiled for."""

    version: str
    #: CUDA toolkit version of a CUDA build (``"12.8"``), else None.
    cuda: str | None = None
    #: HIP version of a ROCm build (``"6.3.42131"``), else None.
    hip: str | None = None
    #: How it was told: ``"loaded"`` (torch was imported), ``"version.py"`` or ``"import"``.
    source: str = "version.py"

    @property
    def kind(self) -> str:
        """``"hip"``, ``"cuda"`` or ``"cpu"`` (a ROCm build also sets ``cuda`` on old torch)."""
        if self.hip:
            return "hip"
        if self.cuda:
            return "cuda"
        return "cpu"

    @property
    def cuda_major(self) -> int | None:
        """Major version of the CUDA toolkit torch was built with, for the driver check."""
        if not self.cuda or self.hip:
            return None
        head = self.cuda.split(".")[0]
        return int(head) if head.isdigit() else None

    def describe(self) -> str:
        """``"torch 2.13.0+cpu"``, the subject of reasons and of ``accelctl env``."""
        return f"torch {self.version}"


def read_version_file(path: Path) -> TorchBuild | None:
    """Parse a ``torch/version.py`` without executing it; None when it is missing or unusual."""
    found = version_literals(path)
    if found is None:
        return None
    version = found.get("__version__")
    if not isinstance(version, str):
        return None
    cuda, hip = found.get("cuda"), found.get("hip")
    return TorchBuild(
        version=version,
        cuda=cuda if isinstance(cuda, str) else None,
        hip=hip if isinstance(hip, str) else None,
        source="version.py",
    )


def _from_module(torch_version: Any, source: str) -> TorchBuild:
    cuda, hip = getattr(torch_version, "cuda", None), getattr(torch_version, "hip", None)
    return TorchBuild(
        version=str(getattr(torch_version, "__version__", "?")),
        cuda=cuda if isinstance(cuda, str) else None,
        hip=hip if isinstance(hip, str) else None,
        source=source,
    )


def torch_build() -> TorchBuild | None:
    """The installed torch's build, or None when torch is not installed.

    Order: ``torch.version`` when torch is already imported (free, and authoritative); else
    ``torch/version.py`` found through :func:`importlib.util.find_spec` and read as text; else,
    when that file is missing or not the generated one, ``import torch``.
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

"""What torch is installed and how it was built, told without importing it.

``import torch`` costs seconds, so :func:`read_torch_build` parses the literal assignments of the
generated ``torch/version.py`` with :mod:`ast` (never executing it), importing torch only as a
last resort. Public as :mod:`accelctl.torch_build`.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


def loaded_torch() -> ModuleType | None:
    """torch's module once its import has finished (not while another thread imports it)."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    return torch


_FIELDS = ("__version__", "cuda", "hip", "xpu")


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: version, where it is, and the runtimes it was compiled for."""

    version: str
    path: str
    cuda: str | None = None
    hip: str | None = None
    xpu: str | None = None
    #: ``"version.py"`` (read as text), ``"loaded"`` (torch was already imported) or ``"import"``.
    source: str = "version.py"

    @property
    def kind(self) -> str:
        """``"hip"`` (ROCm), ``"cuda"`` or ``"cpu"`` (old ROCm builds also set ``cuda``)."""
        return "hip" if self.hip else "cuda" if self.cuda else "cpu"

    @property
    def cuda_major(self) -> int | None:
        """Major version of the CUDA toolkit of a CUDA build, for the driver check."""
        if not self.cuda or self.hip:
            return None
        head = self.cuda.split(".")[0]
        return int(head) if head.isdigit() else None

    @property
    def lib_folders(self) -> list[Path]:
        """``torch/lib``, where torch's shared libraries ship (found without importing it)."""
        return [Path(self.path) / "lib"]

    def describe(self) -> str:
        """``"torch 2.13.0+cpu"``, the subject of reasons."""
        return f"torch {self.version}"


def version_literals(path: Path) -> dict[str, Any] | None:
    """Read the literal ``__version__``, ``cuda``, ``hip`` and ``xpu`` of a ``torch/version.py``.

    Top-level values only; the file is never executed. None when it is missing or not the
    generated one."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in _FIELDS:
            try:
                found[target.id] = ast.literal_eval(value)
            except ValueError:  # computed: not the generated file
                return None
    return found if isinstance(found.get("__version__"), str) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _from_module(torch: Any, source: str) -> TorchBuild:
    version = torch.version
    return TorchBuild(
        version=str(getattr(version, "__version__", None) or torch.__version__),
        path=str(Path(torch.__file__).parent),
        cuda=_text(getattr(version, "cuda", None)),
        hip=_text(getattr(version, "hip", None)),
        xpu=_text(getattr(version, "xpu", None)),
        source=source,
    )


def read_torch_build() -> TorchBuild | None:
    """Return the installed torch's build, or None without torch.

    From the imported module, else its ``version.py`` (read once per process), else ``import
    torch``, whose errors it raises."""
    loaded = loaded_torch()
    if loaded is not None and getattr(loaded, "version", None) is not None:
        return _from_module(loaded, "loaded")
    return _from_files()


@functools.cache
def _from_files() -> TorchBuild | None:
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        found = version_literals(Path(folder) / "version.py")
        if found is not None:
            return TorchBuild(
                version=found["__version__"],
                path=str(folder),
                cuda=_text(found.get("cuda")),
                hip=_text(found.get("hip")),
                xpu=_text(found.get("xpu")),
            )
    import torch  # heavy: the last resort, where version.py cannot be read

    return _from_module(torch, "import")


def mps_built(build: TorchBuild) -> bool:
    """Whether torch has its MPS backend (built on macOS only: elsewhere no import is needed)."""
    if sys.platform != "darwin" and build.source != "loaded":
        return False
    import torch  # heavy: on macOS only, or where torch is imported already

    return bool(torch.backends.mps.is_built())


def cudnn_version(build: TorchBuild) -> str | None:
    """Return the cuDNN version of a CUDA build, or None when not known.

    The library's where torch is imported (no CUDA context), else that of the
    ``nvidia-cudnn-cu<major>`` wheel."""
    if not build.cuda:
        return None
    if build.source != "version.py":
        import torch  # imported already (or by the line above's last resort)

        try:
            found = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
        except Exception:  # a CUDA build without a usable cuDNN library
            return None
        return None if found is None else str(found)
    major = build.cuda.split(".")[0]
    try:
        return importlib.metadata.version(f"nvidia-cudnn-cu{major}")
    except importlib.metadata.PackageNotFoundError:
        return None

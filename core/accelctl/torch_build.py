"""What torch is installed and how it was built, told without importing it.

``import torch`` costs seconds and hundreds of MiB; the facts ``accelctl env`` reports are written
in ``torch/version.py``, a module torch's build generates with literal assignments
(``__version__ = '2.13.0+cpu'``, ``cuda = None``, ``hip = None``, ``xpu = None``). It is read here
as text and parsed with :mod:`ast`, never executed. Where torch is already imported, its own
``torch.version`` is read instead; where the file is missing or not the generated one, torch is
imported as a last resort.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def version_literals(path: Path) -> dict[str, Any] | None:
    """The literal top-level assignments of ``__version__``, ``cuda``, ``hip`` and ``xpu`` in a
    ``torch/version.py``, parsed with :mod:`ast` and never executed; None when the file is
    missing or not the generated one. Plugins read their own build facts through it."""
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
        version=str(torch.__version__),
        path=str(Path(torch.__file__).parent),
        cuda=_text(getattr(version, "cuda", None)),
        hip=_text(getattr(version, "hip", None)),
        xpu=_text(getattr(version, "xpu", None)),
        source=source,
    )


def read_torch_build() -> TorchBuild | None:
    """The installed torch's build; None when torch is not installed.

    :raises Exception: whatever ``import torch`` raises, in the last-resort case only (a broken
        install that has no readable ``version.py``).
    """
    loaded = sys.modules.get("torch")
    if loaded is not None and getattr(loaded, "version", None) is not None:
        return _from_module(loaded, "loaded")
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
    import torch

    return _from_module(torch, "import")


def mps_built(build: TorchBuild) -> bool:
    """Whether torch has its MPS backend: torch builds it on macOS only, so elsewhere the answer
    needs no import; on macOS torch is asked (``torch.backends.mps.is_built()``)."""
    if sys.platform != "darwin" and build.source != "loaded":
        return False
    import torch

    return bool(torch.backends.mps.is_built())


def cudnn_version(build: TorchBuild) -> str | None:
    """The cuDNN version of a CUDA build: the library's, where torch is already imported (read
    from the library, no CUDA context); else the version of the ``nvidia-cudnn-cu<major>`` wheel
    that torch's pip build loads; None for other builds or when neither is known."""
    if not build.cuda:
        return None
    if build.source != "version.py":
        import torch

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

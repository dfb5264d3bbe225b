"""What is installed, read from package metadata only (no import): the packages that declare a
torch backend, and the accelctl plugins by name.

torch loads out-of-tree backends on ``import torch`` through the ``torch.backends`` entry-point
group (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD`` is not ``1``), so where no distribution declares
that group no backend can be loaded, and the plugin says no without importing torch. One pass
over the installed distributions reads both groups; it costs a few milliseconds and is made once
per process and search path (torch too reads its group once, at import).
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

TORCH_BACKENDS_GROUP = "torch.backends"
ACCELCTL_GROUP = "accelctl.accelerators"


@dataclass(frozen=True)
class BackendPackage:
    """A distribution that declares an entry point in ``torch.backends``."""

    distribution: str
    version: str
    #: The top-level module of its entry point (``torch_openreg``), to tell which package a
    #: loaded backend came from.
    module: str

    def describe(self) -> str:
        """``"torch_openreg 0.0.1"``."""
        return f"{self.distribution} {self.version}"


@dataclass(frozen=True)
class Installed:
    """The torch backend packages, and the accelctl plugins by entry-point name."""

    backends: tuple[BackendPackage, ...] = ()
    #: Entry-point name (lower case) -> the distributions that declare it.
    plugins: dict[str, tuple[metadata.Distribution, ...]] = field(default_factory=dict)

    def backends_text(self) -> str:
        """``"torch_openreg 0.0.1"`` (several: joined with "and")."""
        return " and ".join(package.describe() for package in self.backends)

    def plugin_distributions(self, name: str) -> list[str]:
        """The distributions whose ``accelctl.accelerators`` entry point is called ``name``."""
        return [name_and_version(dist)[0] for dist in self.plugins.get(name.lower(), ())]


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def name_and_version(dist: metadata.Distribution) -> tuple[str, str]:
    """``Name`` and ``Version`` from the METADATA headers, without the e-mail parser over the
    whole file (which, over hundreds of installed plugins, costs more than the scan)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the end of the headers
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in fields:
            fields[key] = value.strip()
    return fields.get("Name", "?"), fields.get("Version", "?")


def scan(path: Sequence[str] | None = None) -> Installed:
    """The distributions on ``path`` (default: ``sys.path``), read once per process and path."""
    return _scan(None if path is None else tuple(path))


@functools.lru_cache(maxsize=8)
def _scan(path: tuple[str, ...] | None) -> Installed:
    dists = metadata.distributions() if path is None else metadata.distributions(path=list(path))
    seen: set[str] = set()
    backends: list[BackendPackage] = []
    plugins: dict[str, list[metadata.Distribution]] = {}
    for dist in dists:
        # The folder name gives the normalised name without parsing METADATA.
        key = getattr(dist, "_normalized_name", None) or _key(dist.metadata["Name"] or "")
        if key in seen:  # installed twice on the path: the first wins, as for imports
            continue
        seen.add(key)
        for ep in dist.entry_points:
            if ep.group == TORCH_BACKENDS_GROUP:
                name, version = name_and_version(dist)
                backends.append(BackendPackage(name, version, ep.module.partition(".")[0]))
            elif ep.group == ACCELCTL_GROUP:
                plugins.setdefault(ep.name.lower(), []).append(dist)
    return Installed(
        backends=tuple(dict.fromkeys(backends)),
        plugins={name: tuple(owners) for name, owners in plugins.items()},
    )


def forget() -> None:
    """Scan again on the next call (after a ``pip install`` in a running process; tests)."""
    _scan.cache_clear()

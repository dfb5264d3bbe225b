"""What is installed, read from package metadata only.

Nothing is imported. It finds the packages that declare a torch backend and, once a backend
is loaded, the accelctl plugins by name.

torch loads out-of-tree backends on ``import torch`` through the ``torch.backends`` entry-point
group (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD`` is not ``1``), so where no distribution declares
that group no backend can be loaded, and the plugin says no without importing torch. Each scan
looks at the text of every distribution's entry_points.txt and parses only those that declare the
group; it is made once per process and search path.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

TORCH_BACKENDS_GROUP = "torch.backends"
ACCELCTL_GROUP = "accelctl.accelerators"


class BackendPackage(NamedTuple):
    """A distribution that declares an entry point in ``torch.backends``."""

    distribution: str
    version: str
    #: The top-level module of its entry point (``torch_openreg``), to tell which package a
    #: loaded backend came from.
    module: str

    def describe(self) -> str:
        """``"torch_openreg 0.0.1"``."""
        return f"{self.distribution} {self.version}"


class Installed(NamedTuple):
    """The torch backend packages on a search path, and a lookup of accelctl plugins there."""

    backends: tuple[BackendPackage, ...] = ()
    path: tuple[str, ...] | None = None

    def backends_text(self) -> str:
        """``"torch_openreg 0.0.1"`` (several: joined with "and")."""
        return " and ".join(package.describe() for package in self.backends)

    def plugin_distributions(self, name: str) -> list[str]:
        """Return the distributions whose ``accelctl.accelerators`` entry point is called ``name``.

        They are read on the default path, from accelctl's one scan.
        """
        if self.path is None:
            from accelctl.torch_backends import plugin_distributions

            return plugin_distributions(name)
        return list(_plugins(self.path).get(name.lower(), ()))


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def name_and_version(dist: metadata.Distribution) -> tuple[str, str]:
    """``Name`` and ``Version`` from the distribution's metadata (``"?"`` where one is missing).

    Asked only of the few distributions that declare a group this plugin reads (the scan has
    skipped the others by a look at their entry_points.txt), so the standard parser's cost does
    not add up."""
    parsed = dist.metadata
    return parsed["Name"] or "?", parsed["Version"] or "?"


def _declaring(path: tuple[str, ...] | None, group: str) -> Iterator[metadata.Distribution]:
    """Return the distributions on ``path`` whose entry_points.txt has a section ``group``.

    Each is listed once; of one installed twice on the path, the first wins, as for imports.
    """
    dists = metadata.distributions() if path is None else metadata.distributions(path=list(path))
    seen: set[str] = set()
    header = f"[{group}]"
    for dist in dists:
        # The folder name gives the normalised name without parsing METADATA.
        key = getattr(dist, "_normalized_name", None) or _key(dist.metadata["Name"] or "")
        if key in seen:
            continue
        seen.add(key)
        # Most distributions declare no such group: a look at the text spares parsing it.
        if header in (dist.read_text("entry_points.txt") or ""):
            yield dist


def scan(path: Sequence[str] | None = None) -> Installed:
    """Return the torch backend packages on ``path``, read once per process and path.

    ``path`` defaults to what accelctl found installed, from its own scan
    (:func:`accelctl.torch_backends.backend_entry_points`). Once is enough: torch, too, reads
    its group once, at import.
    """
    if path is None:
        from accelctl.torch_backends import backend_entry_points

        found = backend_entry_points()
        return Installed(
            backends=tuple(
                dict.fromkeys(
                    BackendPackage(
                        entry.distribution or "?",
                        entry.version or "?",
                        entry.value.partition(":")[0].partition(".")[0].strip(),
                    )
                    for entry in found
                )
            )
        )
    return _scan(tuple(path))


@functools.lru_cache(maxsize=8)
def _scan(path: tuple[str, ...] | None) -> Installed:
    backends: list[BackendPackage] = []
    for dist in _declaring(path, TORCH_BACKENDS_GROUP):
        for ep in dist.entry_points.select(group=TORCH_BACKENDS_GROUP):
            name, version = name_and_version(dist)
            backends.append(BackendPackage(name, version, ep.module.partition(".")[0]))
    return Installed(backends=tuple(dict.fromkeys(backends)), path=path)


@functools.lru_cache(maxsize=8)
def _plugins(path: tuple[str, ...] | None) -> dict[str, tuple[str, ...]]:
    """Map entry-point names to distributions for the ``accelctl.accelerators`` group.

    Entry-point name (lower case) -> distributions, for the ``accelctl.accelerators`` group;
    read only once a backend is loaded (to see whether a dedicated plugin claims it)."""
    found: dict[str, list[str]] = {}
    for dist in _declaring(path, ACCELCTL_GROUP):
        for ep in dist.entry_points.select(group=ACCELCTL_GROUP):
            found.setdefault(ep.name.lower(), []).append(name_and_version(dist)[0])
    return {name: tuple(owners) for name, owners in found.items()}


def forget() -> None:
    """Scan again on the next call (after a ``pip install`` in a running process; tests)."""
    _scan.cache_clear()
    _plugins.cache_clear()

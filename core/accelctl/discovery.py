"""Finding installed plugins: one scan of the ``accelctl.accelerators`` entry points, no imports.

Discovery reads package metadata only. It never imports a plugin: the allowlist and blocklist
(``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE``) are applied here, before anything is loaded, and a
plugin is imported only when :mod:`accelctl.registry` needs it.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ._project import ENTRY_POINT_GROUP, ENV_DISABLE, ENV_PLUGINS, RESERVED_NAMES
from .info import is_valid_name


def _normalise_dist_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@dataclass(eq=False)
class PluginEntry:
    """One entry point of the group ``accelctl.accelerators``, as installed.

    ``distribution`` and ``version`` are read from the package's metadata on first use.
    """

    entry_point: metadata.EntryPoint = field(repr=False)

    @property
    def name(self) -> str:
        """The accelerator's canonical name: the entry point's name."""
        return self.entry_point.name

    @property
    def value(self) -> str:
        """What the entry point loads, ``"module"`` or ``"module:attr"``."""
        return self.entry_point.value

    @cached_property
    def distribution(self) -> str | None:
        """The distribution (``pip`` package) that declares the entry point."""
        dist = self.entry_point.dist
        return None if dist is None else dist.metadata["Name"]

    @cached_property
    def version(self) -> str | None:
        """The declaring distribution's version."""
        dist = self.entry_point.dist
        return None if dist is None else dist.version

    def name_problem(self) -> str | None:
        """Why the entry point's name cannot be an accelerator name, or None when it can."""
        if self.name in RESERVED_NAMES:
            return (
                f"entry point name {self.name!r} is reserved (reserved: "
                f"{', '.join(sorted(RESERVED_NAMES))}); choose the accelerator's own name"
            )
        if not is_valid_name(self.name):
            return (
                f"entry point name {self.name!r} is not a valid accelerator name; "
                "use lowercase letters, digits, '_' and '-'"
            )
        return None

    def load(self) -> object:
        """Import the entry point's object (a module, a class or an instance)."""
        return self.entry_point.load()


def scan_entry_points(path: Sequence[str] | None = None) -> list[PluginEntry]:
    """Every accelerator entry point installed on ``path`` (default: ``sys.path``).

    A distribution installed twice on the path counts once (the first wins, as for imports), the
    rule :func:`importlib.metadata.entry_points` follows.
    """
    return list(_iter_entries(path))


def _iter_entries(path: Sequence[str] | None) -> Iterator[PluginEntry]:
    seen: set[str] = set()
    dists = (
        metadata.distributions(path=list(path)) if path is not None else metadata.distributions()
    )
    for dist in dists:
        # The folder name gives the normalised name without parsing METADATA (what
        # importlib.metadata.entry_points() itself relies on); parse only where it is missing.
        key = getattr(dist, "_normalized_name", None) or _normalise_dist_name(
            dist.metadata["Name"] or ""
        )
        if key in seen:
            continue
        seen.add(key)
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                yield PluginEntry(ep)


def _split_names(value: str) -> frozenset[str]:
    return frozenset(part.strip().lower() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class PluginFilter:
    """The user's choice of plugins, from ``ACCELCTL_PLUGINS`` and ``ACCELCTL_DISABLE``.

    ``allow`` is None when ``ACCELCTL_PLUGINS`` is unset (every plugin); set and empty, it allows
    none.
    """

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> PluginFilter:
        allow = environ.get(ENV_PLUGINS)
        return cls(
            allow=None if allow is None else _split_names(allow),
            deny=_split_names(environ.get(ENV_DISABLE, "")),
        )

    def blocked_reason(self, name: str) -> str | None:
        """Why ``name`` must not be loaded, naming the variable; None when it may be."""
        if name.lower() in self.deny:
            return f"disabled by {ENV_DISABLE}"
        if self.allow is not None and name.lower() not in self.allow:
            listed = ",".join(sorted(self.allow)) or "<empty>"
            return f"disabled: {ENV_PLUGINS}={listed} does not list it"
        return None

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
    def _name_and_version(self) -> tuple[str | None, str | None]:
        dist = self.entry_point.dist
        return (None, None) if dist is None else _read_name_and_version(dist)

    @property
    def distribution(self) -> str | None:
        """The distribution (``pip`` package) that declares the entry point."""
        return self._name_and_version[0]

    @property
    def version(self) -> str | None:
        """The declaring distribution's version."""
        return self._name_and_version[1]

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


def _read_name_and_version(dist: metadata.Distribution) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from the distribution's metadata file.

    ``dist.metadata`` runs the e-mail parser over the whole file (the long description included)
    at every access, which with hundreds of plugins costs more than the scan itself; both fields
    are single-line headers, so the header lines are read directly, and the full parser is used
    only when one of them is not found that way.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the end of the headers
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in fields:
            fields[key] = value.strip()
    if "Name" not in fields or "Version" not in fields:
        parsed = dist.metadata
        return parsed["Name"], parsed["Version"]
    return fields["Name"], fields["Version"]


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

"""Finding installed plugins: one scan of the ``accelctl.accelerators`` entry points, no imports.

Discovery reads package metadata only. It never imports a plugin: the allowlist and blocklist
(``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE``) are applied here, before anything is loaded, and a
plugin is imported only when :mod:`accelctl._registry` needs it.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ._errors import PluginWarning
from ._info import is_valid_name
from ._project import ENTRY_POINT_GROUP, ENV_DISABLE, ENV_PLUGINS, RESERVED_NAMES
from ._text import describe_exception, quote


def _normalise_dist_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_key(dist: metadata.Distribution) -> str:
    """The distribution's normalised name: from its folder's name where it has one (what
    :func:`importlib.metadata.entry_points` itself relies on), else from its metadata."""
    key = getattr(dist, "_normalized_name", None)
    if key:
        return str(key)
    try:
        return _normalise_dist_name(dist.metadata["Name"] or "")
    except Exception:  # unreadable metadata: keyed by its place instead, never merged
        return f"<unreadable {_metadata_file(dist, '')}>"


def _metadata_file(dist: metadata.Distribution, filename: str) -> str:
    """Where ``filename`` of ``dist`` lives, for messages (the folder of a path distribution)."""
    folder = getattr(dist, "_path", None)
    return str(folder / filename) if folder is not None and filename else str(folder or filename)


def _reinstall_hint(name: str | None) -> str:
    return f"reinstall it (pip install --force-reinstall {name})" if name else "reinstall it"


@dataclass(eq=False)
class PluginEntry:
    """One entry point of the group ``accelctl.accelerators``, as installed.

    ``distribution`` and ``version`` are read from the package's metadata on first use. An entry
    whose distribution's metadata cannot be read has a :attr:`problem` and is never imported.
    """

    entry_point: metadata.EntryPoint = field(repr=False)
    #: The declaring distribution, when ``entry_point`` does not carry it.
    dist: metadata.Distribution | None = field(default=None, repr=False)
    #: Why the distribution's entry points could not be read (set by the scan).
    unreadable: str | None = None

    @property
    def name(self) -> str:
        """The accelerator's canonical name: the entry point's name."""
        return self.entry_point.name

    @property
    def value(self) -> str:
        """What the entry point loads, ``"module"`` or ``"module:attr"``."""
        return self.entry_point.value

    @cached_property
    def _metadata(self) -> tuple[str | None, str | None, str | None]:
        """(name, version, why the metadata could not be read)."""
        dist = self.dist or self.entry_point.dist
        if dist is None:
            return None, None, None
        try:
            return (*_read_name_and_version(dist), None)
        except Exception as exc:  # a broken METADATA: named, never fatal to the others
            name = getattr(dist, "_normalized_name", None)
            problem = (
                f"cannot read the metadata of distribution {name or '?'} "
                f"({_metadata_file(dist, 'METADATA')}): {describe_exception(exc)}; "
                f"{_reinstall_hint(name)}"
            )
            return name, None, problem

    @property
    def distribution(self) -> str | None:
        """The distribution (``pip`` package) that declares the entry point."""
        return self._metadata[0]

    @property
    def version(self) -> str | None:
        """The declaring distribution's version."""
        return self._metadata[1]

    @property
    def problem(self) -> str | None:
        """Why the entry cannot be loaded whatever its code: its distribution's metadata (entry
        points or METADATA) cannot be read. None when it can."""
        return self.unreadable or self._metadata[2]

    def name_problem(self) -> str | None:
        """Why the entry point's name cannot be an accelerator name, or None when it can."""
        if self.name in RESERVED_NAMES:
            return (
                f"entry point name {self.name!r} is reserved (reserved: "
                f"{', '.join(sorted(RESERVED_NAMES))}); choose the accelerator's own name"
            )
        if not is_valid_name(self.name):
            return (
                f"entry point name {quote(self.name)} is not a valid accelerator name; "
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
    rule :func:`importlib.metadata.entry_points` follows. A distribution whose entry points
    cannot be read is skipped; when it declares the group ``accelctl.accelerators``, its
    entries come back with a :attr:`PluginEntry.problem` naming the distribution and the file
    (see :func:`_unreadable_entries`).
    """
    return list(_iter_entries(path))


def _iter_entries(path: Sequence[str] | None) -> Iterator[PluginEntry]:
    seen: set[str] = set()
    dists = (
        metadata.distributions(path=list(path)) if path is not None else metadata.distributions()
    )
    for dist in dists:
        key = _dist_key(dist)
        if key in seen:
            continue
        seen.add(key)
        try:
            entry_points = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        except Exception as exc:  # a malformed entry_points.txt: that distribution alone
            yield from _unreadable_entries(dist, exc)
            continue
        for ep in entry_points:
            yield PluginEntry(ep)


_SECTION_RE = re.compile(r"^\s*\[\s*(?P<name>[^\]]*?)\s*\]\s*$")


def _unreadable_entries(dist: metadata.Distribution, exc: Exception) -> Iterator[PluginEntry]:
    """The accelerator entries of a distribution whose ``entry_points.txt`` does not parse.

    None when it declares no ``[accelctl.accelerators]`` section (a warning says it is skipped);
    else the ``name = value`` lines that section still has (or one entry named after the
    distribution), each with the problem, so ``accelctl list`` shows them as broken and none is
    imported."""
    try:
        text = dist.read_text("entry_points.txt") or ""
    except UnicodeDecodeError as decode_error:  # keep what can be read, to find the section
        text = bytes(decode_error.object).decode("utf-8", "replace")
    except Exception:
        return
    section: str | None = None
    names: list[tuple[str, str]] = []
    declared = False
    bad_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        match = _SECTION_RE.match(line)
        if match:
            section = match.group("name")
            declared = declared or section == ENTRY_POINT_GROUP
            continue
        name, sep, value = stripped.partition("=")
        if not sep:
            bad_line = bad_line or f"line {number} ({quote(stripped, 60)}) is not 'name = value'"
        elif section == ENTRY_POINT_GROUP:
            names.append((name.strip(), value.strip()))
    dist_name = getattr(dist, "_normalized_name", None)
    why = bad_line or describe_exception(exc)
    problem = (
        f"cannot read the entry points of distribution {dist_name or '?'} "
        f"({_metadata_file(dist, 'entry_points.txt')}): {why}; {_reinstall_hint(dist_name)}"
    )
    if not declared:
        # Not a plugin, but worth a line: whatever reads every distribution's entry points
        # fails on it (``import torch``, whose backend autoload does, among them).
        warnings.warn(f"skipping a broken distribution: {problem}", PluginWarning, stacklevel=2)
        return
    for name, value in names or [(dist_name or "unreadable", "")]:
        entry_point = metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
        yield PluginEntry(entry_point, dist=dist, unreadable=problem)


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

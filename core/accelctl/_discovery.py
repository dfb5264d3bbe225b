"""Finding what is installed: one pass over the distributions, reading text, importing nothing.

Each ``entry_points.txt`` is read once; those declaring ``accelctl.accelerators`` or
``torch.backends`` are parsed by hand, so that one bad line breaks only its own distribution. A
broken file that declares neither is named in a :class:`~accelctl.PluginWarning` (torch's own
backend autoload fails on it).
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from ._errors import PluginWarning
from ._info import is_valid_name
from ._project import ENTRY_POINT_GROUP, RESERVED_NAMES
from ._text import describe_exception, quote

TORCH_BACKENDS_GROUP = "torch.backends"
_GROUPS = (ENTRY_POINT_GROUP, TORCH_BACKENDS_GROUP)
_HEADERS = tuple(f"[{group}]" for group in _GROUPS)
_SEPARATORS = re.compile(r"[-_.]+")
_SECTION = re.compile(r"^\s*\[\s*(?P<name>[^\]]*?)\s*\]\s*$")


class Found(NamedTuple):
    """One entry point of either group: its name, value and distribution; ``problem`` says why
    the distribution's files cannot be trusted (the entry is then never imported)."""

    group: str
    name: str
    value: str
    dist: metadata.Distribution
    problem: str | None = None

    def identity(self) -> tuple[str | None, str | None, str | None]:
        """The distribution's name and version, and why they cannot be read (None when they can)."""
        try:
            return (*read_name_and_version(self.dist), None)
        except Exception as exc:  # a broken METADATA: named, never fatal to the others
            key = getattr(self.dist, "_normalized_name", None)
            return (
                key,
                None,
                f"cannot read the metadata of distribution {key or '?'} "
                f"({folder_of(self.dist, 'METADATA')}): {describe_exception(exc)}; "
                f"{reinstall_hint(key)}",
            )

    def name_problem(self) -> str | None:
        """Why the entry point's name cannot be an accelerator's, or None when it can."""
        if self.name in RESERVED_NAMES:
            return (
                f"entry point name {self.name!r} is reserved (reserved: "
                f"{', '.join(sorted(RESERVED_NAMES))}); choose the accelerator's own name"
            )
        if not is_valid_name(self.name):
            return (
                f"entry point name {quote(self.name)} is not a valid accelerator name; use "
                "lowercase letters, digits, '_' and '-'"
            )
        return None


def folder_of(dist: metadata.Distribution, filename: str = "") -> str:
    """Where ``filename`` of ``dist`` lives, for messages (the ``.dist-info`` folder)."""
    folder = getattr(dist, "_path", None)
    if folder is None:
        return filename or "?"
    return str(folder / filename) if filename else str(folder)


def dist_key(dist: metadata.Distribution) -> str:
    """The distribution's normalised name: from its folder's name where it has one (as
    :func:`importlib.metadata.entry_points` does), else from its metadata."""
    folder = getattr(dist, "_path", None)
    if isinstance(folder, os.PathLike):  # a folder (a zip's is a zipfile.Path: importlib's way)
        # importlib's own rule (`_normalized_name`), without its layers of wrappers: over
        # hundreds of distributions they cost more than reading the files.
        stem, suffix = os.path.splitext(os.path.basename(folder))
        if suffix in (".dist-info", ".egg-info"):
            return _SEPARATORS.sub("_", stem.partition("-")[0]).lower()
    key = getattr(dist, "_normalized_name", None)
    if key:
        return str(key)
    try:
        return _SEPARATORS.sub("_", dist.metadata["Name"] or "").lower()
    except Exception:  # unreadable metadata: keyed by its place, never merged with another
        return f"<unreadable {folder_of(dist)}>"


def reinstall_hint(name: str | None) -> str:
    """What to do about a distribution whose files are damaged."""
    return f"reinstall it (pip install --force-reinstall {name})" if name else "reinstall it"


def scan(path: Sequence[str] | None = None, *, warn: bool = True) -> Iterator[Found]:
    """Every entry point of the two groups on ``path`` (default: ``sys.path``); a distribution
    installed twice counts once (the first, as for imports). ``warn``: name a broken one that
    declares neither group (a second scan need not say it again)."""
    dists = metadata.distributions() if path is None else metadata.distributions(path=list(path))
    seen: set[str] = set()
    for dist in dists:
        key = dist_key(dist)
        if key in seen:
            continue
        seen.add(key)
        try:
            text = _entry_points_text(dist)
        except UnicodeDecodeError as exc:  # keep what can be read, to find the sections
            yield from _entries(dist, bytes(exc.object).decode("utf-8", "replace"), exc, warn)
            continue
        except Exception as exc:
            yield from _entries(dist, "", exc, warn)
            continue
        if text:
            yield from _entries(dist, text, None, warn)


def _entry_points_text(dist: metadata.Distribution) -> str:
    """The distribution's ``entry_points.txt``, "" when it has none; as ``dist.read_text`` reads
    it (the same errors mean "none"), at a third of its cost where the distribution is a folder."""
    folder = getattr(dist, "_path", None)
    if not isinstance(folder, os.PathLike):  # in a zip, or a custom finder's: importlib's way
        return dist.read_text("entry_points.txt") or ""
    try:
        with open(os.path.join(folder, "entry_points.txt"), "rb") as file:
            data = file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return ""
    return data.decode("utf-8")  # its lines are split on any newline, as text mode would


def _entries(
    dist: metadata.Distribution, text: str, error: Exception | None, warn: bool
) -> Iterator[Found]:
    """The entries of one ``entry_points.txt``; all marked with the problem when it is bad."""
    if error is None and not any(header in text for header in _HEADERS):
        # Most declare neither group: only look for a line that would break torch's autoload.
        if all(
            "=" in line or line.lstrip()[:1] in ("", "#", ";", "[") for line in text.splitlines()
        ):
            return
    section: str | None = None
    found: list[tuple[str, str, str]] = []
    declared: set[str] = set()
    bad_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        match = _SECTION.match(line) if stripped[0] == "[" else None
        if match:
            section = match.group("name")
            if section in _GROUPS:
                declared.add(section)
            continue
        name, sep, value = stripped.partition("=")
        if not sep:
            bad_line = bad_line or f"line {number} ({quote(stripped, 60)}) is not 'name = value'"
        elif section in _GROUPS:
            found.append((section, name.strip(), value.strip()))
    if error is None and bad_line is None:
        for group, name, value in found:
            yield Found(group, name, value, dist)
        return
    dist_name = getattr(dist, "_normalized_name", None)
    why = bad_line or describe_exception(error or ValueError())
    problem = (
        f"cannot read the entry points of distribution {dist_name or '?'} "
        f"({folder_of(dist, 'entry_points.txt')}): {why}; {reinstall_hint(dist_name)}"
    )
    if not declared:
        if not warn:
            return
        # Not a plugin, but worth a line: torch's backend autoload fails on it.
        warnings.warn(f"skipping a broken distribution: {problem}", PluginWarning, stacklevel=3)
        return
    if ENTRY_POINT_GROUP in declared:
        named = [(n, v) for g, n, v in found if g == ENTRY_POINT_GROUP]
        for name, value in named or [(dist_name or "unreadable", "")]:
            yield Found(ENTRY_POINT_GROUP, name, value, dist, problem)


def read_name_and_version(dist: metadata.Distribution) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from the metadata headers, without the e-mail parser over the
    whole file (over hundreds of plugins it costs more than the scan); raises what reading does."""
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

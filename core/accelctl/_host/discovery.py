"""Finding what is installed: one pass over the distributions, reading text, importing nothing.

Each ``entry_points.txt`` is read once; those declaring ``accelctl.accelerators`` or
``torch.backends`` are parsed by hand, so that one bad line breaks only its own distribution. A
broken file that declares neither is named in a :class:`~accelctl.PluginWarning` (torch's own
backend autoload fails on it). The CLI's commands contributed by distributions
(``accelctl.commands``) are found by a scan of that group alone, only when the CLI needs them.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import pathlib
import re
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import PathFinder
from typing import NamedTuple, TypeAlias

from .._base.problem import Problem
from .._base.project import ENTRY_POINT_GROUP, PROJECT_NAME, RESERVED_NAMES
from .._base.text import describe_exception, quote
from .._contract.errors import PluginWarning, warn_user
from .._contract.info import is_valid_name

TORCH_BACKENDS_GROUP = "torch.backends"
#: Commands of the ``accelctl`` CLI that distributions add (name -> a click command).
COMMANDS_GROUP = f"{PROJECT_NAME}.commands"
_GROUPS = (ENTRY_POINT_GROUP, TORCH_BACKENDS_GROUP)
_SEPARATORS = re.compile(r"[-_.]+")
_SECTION = re.compile(r"^\s*\[\s*(?P<name>[^\]]*?)\s*\]\s*$")
_CHUNK = 1 << 16


#: Where a distribution's files are: the path of its ``.dist-info`` folder, or importlib's object
#: where it is not a folder (a zip, an egg, another finder's).
Origin: TypeAlias = str | metadata.Distribution


class Found(NamedTuple):
    """One entry point of either group, the scan's plain output.

    Its name, value and distribution (``origin``); ``problem`` says why the distribution's files
    cannot be trusted (the entry is then never imported). The registry makes a handle of each at
    once."""

    group: str
    name: str
    value: str
    origin: Origin
    problem: Problem | None = None


def distribution(origin: Origin) -> metadata.Distribution:
    """importlib's view of the distribution, made when asked (most entries never are)."""
    if isinstance(origin, str):
        return metadata.PathDistribution(pathlib.Path(origin))
    return origin


class Identity(NamedTuple):
    """Who installed a plugin: the distribution's name and version, or why they cannot be read.

    None when they can be read; the name is then the folder's, the version None."""

    distribution: str | None
    version: str | None
    problem: Problem | None = None


def read_identity(origin: Origin) -> Identity:
    """The :class:`Identity` of the distribution at ``origin``, read from its metadata."""
    try:
        return Identity(*read_name_and_version(distribution(origin)))
    except Exception as exc:  # a broken METADATA: named, never fatal to the others
        key = _dist_name(origin)
        return Identity(
            key,
            None,
            Problem(
                f"cannot read the metadata of distribution {key or '?'} "
                f"({folder_of(origin, 'METADATA')}): {describe_exception(exc)}; "
                f"{reinstall_hint(key)}",
                exc,
            ),
        )


def name_problem(name: str) -> Problem | None:
    """Why an entry point's name cannot be an accelerator's, or None when it can."""
    if name in RESERVED_NAMES:
        return Problem(
            f"entry point name {name!r} is reserved (reserved: "
            f"{', '.join(sorted(RESERVED_NAMES))}); choose the accelerator's own name"
        )
    if not is_valid_name(name):
        return Problem(
            f"entry point name {quote(name)} is not a valid accelerator name; use "
            "lowercase letters, digits, '_' and '-'"
        )
    return None


def folder_of(origin: Origin, filename: str = "") -> str:
    """Where ``filename`` of a distribution lives, for messages (the ``.dist-info`` folder)."""
    folder = origin if isinstance(origin, str) else getattr(origin, "_path", None)
    if folder is None:
        return filename or "?"
    return os.path.join(str(folder), filename) if filename else str(folder)


def dist_key(origin: Origin) -> str:
    """Return the distribution's normalised name.

    From its folder's name where it has one (importlib's rule, as
    :func:`importlib.metadata.entry_points` applies it), else from its metadata."""
    folder = origin if isinstance(origin, str) else getattr(origin, "_path", None)
    if isinstance(folder, (str, os.PathLike)):  # a folder (a zip's is a zipfile.Path)
        key = _folder_key(os.path.basename(folder))
        if key is not None:
            return key
    if isinstance(origin, str):  # never listed by this scan (it lists those two suffixes)
        return f"<{origin}>"
    key = getattr(origin, "_normalized_name", None)
    if key:
        return str(key)
    try:
        return _SEPARATORS.sub("_", origin.metadata["Name"] or "").lower()
    except Exception:  # unreadable metadata: keyed by its place, never merged with another
        return f"<unreadable {folder_of(origin)}>"


def _folder_key(name: str) -> str | None:
    """Return the normalised distribution name of a ``.dist-info`` or ``.egg-info`` folder's name.

    By importlib's rule, for ``<name>-<version>.dist-info``; None for any other name."""
    stem, dot, suffix = name.lower().rpartition(".")
    if not dot or suffix not in ("dist-info", "egg-info"):
        return None
    return _SEPARATORS.sub("_", stem.partition("-")[0])


def _dist_name(origin: Origin) -> str | None:
    """The distribution's normalised name for messages (None where importlib cannot say)."""
    if isinstance(origin, str):
        return dist_key(origin)
    return getattr(origin, "_normalized_name", None)


def reinstall_hint(name: str | None) -> str:
    """What to do about a distribution whose files are damaged."""
    return f"reinstall it (pip install --force-reinstall {name})" if name else "reinstall it"


def scan(
    path: Sequence[str] | None = None,
    *,
    warn: bool = True,
    groups: Sequence[str] = _GROUPS,
    unreadable: list[Problem] | None = None,
) -> Iterator[Found]:
    """Return every entry point of ``groups`` on ``path``, each distribution counted once.

    ``groups`` defaults to the accelerators' and torch's backends', ``path`` to ``sys.path``; of a
    distribution installed twice, the first counts (as for imports). ``warn``: name a broken one
    that declares none of ``groups`` (a second scan need not say it again). A broken file's entries
    in ``groups`` come with its ``problem`` (torch's backends: none; torch's own autoload reports
    them). ``unreadable``, where given, receives the problem of every ``entry_points.txt`` that
    cannot be read, which would break torch's backend autoload."""
    headers = tuple(f"[{group}]" for group in groups)
    seen: set[str] = set()
    for key, origin in distributions(path):
        if key in seen:
            continue
        seen.add(key)
        try:
            text = _entry_points_text(origin)
        except UnicodeDecodeError as exc:  # keep what can be read, to find the sections
            text = bytes(exc.object).decode("utf-8", "replace")
            yield from _entries(origin, text, exc, warn, groups, headers, unreadable)
            continue
        except Exception as exc:
            yield from _entries(origin, "", exc, warn, groups, headers, unreadable)
            continue
        if text:
            yield from _entries(origin, text, None, warn, groups, headers, unreadable)


def distributions(
    path: Sequence[str] | None = None,
) -> Iterator[tuple[str, Origin]]:
    """Return what :func:`importlib.metadata.distributions` finds, each with its :func:`dist_key`.

    The path of each ``.dist-info`` / ``.egg-info`` folder in a folder on ``path`` (default:
    ``sys.path``), listed here; importlib's own objects for a zip, an egg and any other finder's
    distributions.

    importlib wraps every folder it lists in two ``pathlib`` objects and a ``Distribution``
    before anything can read it: over a thousand distributions that is most of a scan, and a
    named lookup reads one of them.
    """
    entries = sys.path if path is None else list(path)
    for finder in sys.meta_path:
        if finder is PathFinder:
            for entry in entries:
                yield from _listed(entry)
            continue
        find = getattr(finder, "find_distributions", None)
        if find is not None:
            for dist in find(metadata.DistributionFinder.Context(path=entries)):
                yield dist_key(dist), dist


def _listed(entry: str) -> Iterator[tuple[str, Origin]]:
    """The distributions in one entry of the path, as importlib's ``PathFinder`` finds them."""
    if isinstance(entry, str) and not entry.lower().endswith(".egg"):
        try:
            children = os.listdir(entry or ".")  # "" is the working directory
        except NotADirectoryError:  # a zip: importlib's way, below
            pass
        except OSError:  # missing or unreadable: importlib finds nothing there either
            return
        else:
            for child in children:
                key = _folder_key(child)
                if key is not None:
                    yield key, os.path.join(entry, child)
            return
    for dist in PathFinder.find_distributions(metadata.DistributionFinder.Context(path=[entry])):
        yield dist_key(dist), dist


def _entry_points_text(origin: Origin) -> str:
    """Read the distribution's ``entry_points.txt``; "" when it has none.

    As ``dist.read_text`` reads it (the same errors mean "none"), with `os.open` and `os.read` where
    it is a folder."""
    if not isinstance(origin, str):  # in a zip, or a custom finder's: importlib's way
        return origin.read_text("entry_points.txt") or ""
    try:
        descriptor = os.open(f"{origin}{os.sep}entry_points.txt", os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return ""
    try:
        chunks = [os.read(descriptor, _CHUNK)]
        while len(chunks[-1]) == _CHUNK:  # a short read of a regular file is its end
            chunks.append(os.read(descriptor, _CHUNK))
    except IsADirectoryError:
        return ""
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode("utf-8")  # lines split on any newline, as text mode would


def _entries(
    origin: Origin,
    text: str,
    error: Exception | None,
    warn: bool,
    groups: Sequence[str],
    headers: Sequence[str],
    unreadable: list[Problem] | None = None,
) -> Iterator[Found]:
    """Return the entries of ``groups`` in one ``entry_points.txt``.

    All marked with the problem when it is bad."""
    if error is None and not any(header in text for header in headers):
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
            if section in groups:
                declared.add(section)
            continue
        name, sep, value = stripped.partition("=")
        if not sep:
            bad_line = bad_line or f"line {number} ({quote(stripped, 60)}) is not 'name = value'"
        elif section is not None and section in groups:
            found.append((section, name.strip(), value.strip()))
    if error is None and bad_line is None:
        for group, name, value in found:
            yield Found(group, name, value, origin)
        return
    dist_name = _dist_name(origin)
    why = bad_line or describe_exception(error or ValueError())
    problem = Problem(
        f"cannot read the entry points of distribution {dist_name or '?'} "
        f"({folder_of(origin, 'entry_points.txt')}): {why}; {reinstall_hint(dist_name)}",
        None if bad_line else error,  # the exception the words come from
    )
    if unreadable is not None:
        unreadable.append(problem)
    if not declared:
        if not warn:
            return
        # Not a plugin, but worth a line: torch's backend autoload fails on it.
        warn_user(f"skipping a broken distribution: {problem}", PluginWarning)
        return
    if ENTRY_POINT_GROUP in declared:
        named = [(n, v) for g, n, v in found if g == ENTRY_POINT_GROUP]
        for name, value in named or [(dist_name or "unreadable", "")]:
            yield Found(ENTRY_POINT_GROUP, name, value, origin, problem)
    if COMMANDS_GROUP in declared:  # the commands that can be named; each fails when run
        for group, name, value in found:
            if group == COMMANDS_GROUP:
                yield Found(group, name, value, origin, problem)


def read_name_and_version(dist: metadata.Distribution) -> tuple[str | None, str | None]:
    """Read ``Name`` and ``Version`` from the metadata headers, without the e-mail parser.

    The e-mail parser over the whole file, over hundreds of plugins, costs more than the scan.
    Raises what reading does."""
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

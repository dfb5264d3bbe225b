"""What a plugin's code may not do to accelctl in its own process, and how torch is imported.

Raise through it, or steer its configuration at import (docs/concepts.md section 11); and how
accelctl imports torch. Nothing here is set up per hook call, and nothing replaces a process-wide
object: what a plugin could do to a whole process (end it, crash it, write on its stdout) the CLI
keeps out of its own process instead (:mod:`accelctl.cli._child`)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from types import ModuleType

from .._base.problem import Problem
from .._base.text import FIELD_LIMIT, clean, describe_exception, quote
from .._base.torch_build import loaded_torch
from .._contract.errors import PluginLoadError, PluginWarning, warn_user
from .._contract.settings import USER_CHOICES
from .discovery import TORCH_BACKENDS_GROUP, Found, scan


def failure_text(exc: BaseException) -> str:
    """``"TypeName: message"`` of what plugin code raised, clean and bounded, for messages.

    The user's Ctrl-C is raised again instead: a ``KeyboardInterrupt`` in the main thread.
    Signals reach only the main thread, so elsewhere it is the plugin's own; in the main thread
    telling them apart would need a SIGINT handler around every call.
    """
    text = describe_exception(exc)
    if isinstance(exc, KeyboardInterrupt):
        if threading.get_ident() == threading.main_thread().ident:
            raise exc
        text += " (raised by the plugin's own code, not by Ctrl-C)"
    return text


# -- imports ------------------------------------------------------------------------------------


@contextmanager
def watch_import(subject: str) -> Iterator[None]:
    """Undo and report what a plugin's import did to accelctl's configuration.

    ``subject`` names the plugin; the report is a :class:`~accelctl.PluginWarning`. ``ACCELCTL_*``
    variables are put back (the user's choice); ``sys.path`` entries removed or reordered are put
    back, what it only added is kept (a vendor's package may need it)."""
    path = list(sys.path)
    variables = {name: os.environ.get(name) for name in USER_CHOICES}
    try:
        yield
    finally:
        changes = _undo_variables(variables) + _undo_path(path)
        if changes:
            warn_user(
                f"{subject}: importing it {'; '.join(changes)}; report this to the "
                "plugin's authors",
                PluginWarning,
            )


def _undo_variables(variables: dict[str, str | None]) -> list[str]:
    changes = []
    for name, before in variables.items():
        value = os.environ.get(name)
        if value == before:
            continue
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before
        if value is None:
            changes.append(f"removed {name} (was {quote(before or '')}); accelctl restored it")
        else:
            was = "was unset" if before is None else f"was {quote(before)}"
            changes.append(f"set {name}={quote(value)} ({was}); accelctl restored it")
    return changes


def _undo_path(before: list[str]) -> list[str]:
    if sys.path == before:
        return []
    now = list(sys.path)
    added = [entry for entry in now if entry not in before]
    kept = [entry for entry in now if entry in before]
    if kept == before:
        shown = clean(", ".join(repr(entry) for entry in added), FIELD_LIMIT)
        entries = "entry" if len(added) == 1 else "entries"
        return [f"added {len(added)} {entries} to sys.path ({shown}); kept"]
    sys.path[:] = before + added
    missing = len([entry for entry in before if entry not in now])
    what = f"removed {missing} of its entries" if missing else "reordered its entries"
    return [f"changed sys.path ({what}); accelctl put the entries back"]


# -- torch ------------------------------------------------------------------------------------
# accelctl imports torch for the core and the plugins (:mod:`accelctl.torch_build` is their public
# name) as the user would, torch's own backend autoload included, unless a distribution's
# ``entry_points.txt`` cannot be read: torch's autoload fails on it (section 11, "a broken
# distribution breaks only itself"), so there, and only there, the autoload is off for the import
# and the ``torch.backends`` entry points are loaded from accelctl's scan, which skips it.


#: torch's switch for loading out-of-tree backends (the ``torch.backends`` entry points) on import.
AUTOLOAD_VARIABLE = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def import_torch() -> ModuleType:
    """``import torch``, nothing when it is imported already.

    Where a distribution's ``entry_points.txt`` cannot be read (torch's backend autoload would fail
    on it), torch is imported with its autoload off and its out-of-tree backends loaded from
    accelctl's scan (:func:`load_backends`), which skips that distribution.

    :raises PluginLoadError: an out-of-tree backend failed to load with torch (torch's own
        autoload, which fails the import: the error names the backend and how to turn it off).
    """
    loaded = loaded_torch()
    if loaded is not None:
        return loaded
    unreadable: list[Problem] = []
    backends = [
        found
        for found in scan(warn=False, groups=(TORCH_BACKENDS_GROUP,), unreadable=unreadable)
        if found.problem is None
    ]
    if not unreadable:
        try:
            import torch  # heavy: only here, where accelctl imports torch
        except RuntimeError as exc:
            if "backend extension" not in str(exc):  # torch's own words for its autoload
                raise
            raise PluginLoadError(
                f"importing torch failed: {describe_exception(exc)}; uninstall that backend's "
                f"package, or set {AUTOLOAD_VARIABLE}=0 to keep torch from loading it"
            ) from exc
        return torch
    torch = import_torch_alone()  # where another thread imports it, this waits for it
    _load(backends, strict=False)
    return torch


def import_torch_alone() -> ModuleType:
    """Import torch without its out-of-tree backends.

    See :func:`load_backends`: torch's autoload switch is off for the import and put back after.
    Used where a distribution's ``entry_points.txt`` cannot be read, and by the conformance kit,
    which times the backends with a plugin's first ``detect()``."""
    previous = os.environ.get(AUTOLOAD_VARIABLE)
    os.environ[AUTOLOAD_VARIABLE] = "0"
    try:
        import torch  # heavy: only here, where accelctl imports torch
    finally:
        if previous is None:
            del os.environ[AUTOLOAD_VARIABLE]
        else:
            os.environ[AUTOLOAD_VARIABLE] = previous
    return torch


def load_backends(strict: bool = False) -> list[str]:
    """Load the ``torch.backends`` entry points as torch's autoload does, and return their names.

    Unless ``TORCH_DEVICE_BACKEND_AUTOLOAD`` says no. One that fails is named in a warning, or,
    ``strict``, raises."""
    if os.environ.get(AUTOLOAD_VARIABLE, "1") != "1":
        return []
    found = scan(warn=False, groups=(TORCH_BACKENDS_GROUP,))
    return _load([entry for entry in found if entry.problem is None], strict)


def _load(backends: list[Found], strict: bool) -> list[str]:
    if os.environ.get(AUTOLOAD_VARIABLE, "1") != "1":
        return []
    loaded = []
    for found in backends:
        entry = metadata.EntryPoint(found.name, found.value, found.group)
        try:
            entry.load()()  # what torch's own autoload does with each entry point
        except Exception as exc:
            if strict:
                raise
            warn_user(
                f"torch's out-of-tree backend {found.name!r} ({found.value}) failed to load: "
                f"{type(exc).__name__}: {exc}",
                PluginWarning,
            )
            continue
        loaded.append(found.name)
    return loaded

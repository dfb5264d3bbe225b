"""What a plugin's code may not do to accelctl: raise through it, end it, write on its stdout,
or steer its configuration (docs/concepts.md section 11). Nothing here is set up per hook call;
the stdout and ``os._exit`` guards are the CLI's only, since both belong to the whole process.
No in-process guard stops a crash or an ``_exit`` in native code, or writes to descriptor 1.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TextIO, cast

from ._errors import PluginWarning
from ._settings import USER_CHOICES
from ._text import FIELD_LIMIT, clean, describe_exception, quote


class PluginAbort(Exception):
    """A ``BaseException`` that is not an ``Exception`` (``SystemExit``, a plugin's own
    ``KeyboardInterrupt``...) raised by plugin code, contained; ``original`` is what it raised."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(describe_exception(original))
        self.original = original


def original(exc: BaseException) -> BaseException:
    """What the plugin raised: ``exc``, or the exception a :class:`PluginAbort` contains."""
    return exc.original if isinstance(exc, PluginAbort) else exc


def failure_text(exc: BaseException) -> str:
    """``"TypeName: message"`` of what the plugin raised, clean and bounded, for messages."""
    raised = original(exc)
    text = describe_exception(raised)
    if isinstance(raised, KeyboardInterrupt):
        text += " (raised by the plugin's own code, not by Ctrl-C)"
    return text


# -- containment ---------------------------------------------------------------------------


def users_interrupt(exc: BaseException) -> bool:
    """True when ``exc`` is a Ctrl-C to let through: a ``KeyboardInterrupt`` in the main thread.
    Signals reach only the main thread, so elsewhere it is the plugin's own; in the main thread
    telling them apart would need a SIGINT handler around every call."""
    is_main = threading.get_ident() == threading.main_thread().ident
    return isinstance(exc, KeyboardInterrupt) and is_main


def contain(exc: BaseException) -> Exception:
    """What plugin code raised, as an ``Exception`` to report: itself, or a :class:`PluginAbort`;
    the user's Ctrl-C (:func:`users_interrupt`) is raised again."""
    if isinstance(exc, Exception):
        return exc
    if users_interrupt(exc):
        raise exc
    return PluginAbort(exc)


class ProcessExit(SystemExit):
    """Raised instead of ending the process when plugin code calls ``os._exit`` while a command
    of the CLI runs (see :func:`exit_is_plugin_failure`)."""


_real_exit = os._exit


def real_exit(code: int) -> NoReturn:
    """End the process now, as ``os._exit`` does (accelctl's own use, never intercepted)."""
    _real_exit(code)


@contextmanager
def exit_is_plugin_failure() -> Iterator[None]:
    """While in force (the CLI, for a command), ``os._exit(code)`` in this process raises
    :class:`ProcessExit`, which the plugin's code fails with; a forked child still exits."""
    pid = os.getpid()

    def intercept(status: int) -> NoReturn:
        if os.getpid() != pid:
            _real_exit(status)
        raise ProcessExit(
            f"os._exit({status}) was called; accelctl's CLI does not let a plugin end it"
        )

    os._exit = intercept
    try:
        yield
    finally:
        os._exit = _real_exit


# -- stdout -------------------------------------------------------------------------------------


class _StdoutRouter:
    """``sys.stdout`` while :func:`plugin_output_to_stderr` is in force: the thread that turned it
    on writes to the real stdout, any other (plugin code, its threads) to stderr."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self._stdout = stdout
        self._stderr = stderr  # kept: a plugin that rebinds sys.stderr cannot loop it back here
        self._owner = threading.get_ident()

    def _target(self) -> TextIO:
        return self._stdout if threading.get_ident() == self._owner else self._stderr

    def write(self, text: str) -> int:
        return self._target().write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        self._target().writelines(lines)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, buffer, fileno...
        return getattr(self._target(), name)


@contextmanager
def plugin_output_to_stderr() -> Iterator[None]:
    """While in force, what other threads write to ``sys.stdout`` goes to ``sys.stderr``, so
    ``--json`` stays one document (see :class:`_StdoutRouter` and :func:`keep_stdout`)."""
    global _router
    if _router is not None:
        yield
        return
    stdout = sys.stdout
    _router = _StdoutRouter(stdout, sys.stderr)
    sys.stdout = cast(TextIO, _router)
    try:
        yield
    finally:
        _router = None
        sys.stdout = stdout


_router: _StdoutRouter | None = None


def keep_stdout() -> None:
    """Undo a plugin's own replacement of ``sys.stdout`` while the router is in force."""
    if _router is not None and sys.stdout is not _router:
        sys.stdout = cast(TextIO, _router)


# -- imports ------------------------------------------------------------------------------------


@contextmanager
def watch_import(subject: str) -> Iterator[None]:
    """Around a plugin's import (``subject`` names it): undo and report (a
    :class:`~accelctl.PluginWarning`) what it did to accelctl's configuration. ``ACCELCTL_*``
    variables are put back (the user's choice); ``sys.path`` entries removed or reordered are put
    back, what it only added is kept (a vendor's package may need it)."""
    path = list(sys.path)
    variables = {name: os.environ.get(name) for name in USER_CHOICES}
    try:
        yield
    finally:
        changes = _undo_variables(variables) + _undo_path(path)
        if changes:
            warnings.warn(
                f"{subject}: importing it {'; '.join(changes)}; report this to the "
                "plugin's authors",
                PluginWarning,
                stacklevel=3,  # the import's caller, past contextlib
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

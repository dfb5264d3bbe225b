"""What a plugin's code may not do to accelctl: raise through it, end it, write on its stdout,
or steer its configuration. Nothing here is set up per hook call.

- Whatever plugin code raises is the plugin's failure (:func:`contain`): ``Exception`` as it is,
  any other ``BaseException`` (``SystemExit``, ``GeneratorExit``, a plugin's own
  ``KeyboardInterrupt`` off the main thread) as a :class:`PluginAbort`. A ``KeyboardInterrupt``
  in the main thread is let through as the user's Ctrl-C (:func:`users_interrupt`).
- The CLI runs every plugin's code in worker threads (:mod:`accelctl._fanout`), so while
  :func:`plugin_output_to_stderr` is in force what other threads write to ``sys.stdout`` goes to
  stderr and ``--json`` stays one document; while :func:`exit_is_plugin_failure` is in force a
  plugin's ``os._exit`` is a failure instead of the end of the command. **Choice:** both are the
  CLI's, not the library's: ``sys.stdout`` and ``os._exit`` belong to the whole process.
- :class:`watch_import` wraps a plugin's import: a plugin whose import changes ``sys.path`` or one
  of the user's ``ACCELCTL_*`` choices is named in a :class:`~accelctl.PluginWarning`, and the
  change is undone.

What no in-process guard can stop: a crash or an ``_exit`` in native code, writes to file
descriptor 1 that bypass ``sys.stdout``, and what threads the plugin starts do besides printing.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, NoReturn, TextIO, cast

from ._errors import PluginWarning
from ._settings import USER_CHOICES
from ._text import FIELD_LIMIT, clean, describe_exception, quote


class PluginAbort(Exception):
    """A ``BaseException`` that is not an ``Exception`` (``SystemExit``, ``GeneratorExit``, a
    plugin's own ``KeyboardInterrupt``...), raised by plugin code and contained: ``original`` is
    what the plugin raised (also the ``__cause__``)."""

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


def _in_main_thread() -> bool:
    return threading.get_ident() == threading.main_thread().ident


def users_interrupt(exc: BaseException) -> bool:
    """True when ``exc`` is a Ctrl-C to let through: a ``KeyboardInterrupt`` in the main thread.

    **Choice:** Python delivers signals to the main thread only, so elsewhere a
    ``KeyboardInterrupt`` can only be the plugin's own. In the main thread accelctl cannot tell
    the two apart without replacing the program's SIGINT handler around every call, which it
    does not do: it lets the interrupt through.
    """
    return isinstance(exc, KeyboardInterrupt) and _in_main_thread()


def contain(exc: BaseException) -> Exception:
    """What plugin code raised, as an ``Exception`` to report: itself, or a :class:`PluginAbort`.

    :raises KeyboardInterrupt: ``exc`` itself, when it is the user's (:func:`users_interrupt`).
    """
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
    """While in force (the CLI, for a command), ``os._exit(code)`` called in this process raises
    :class:`ProcessExit` instead, which the plugin's code then fails with like any exception;
    in a child process (after a ``fork``) it ends that child as usual. It costs nothing per
    call: ``os._exit`` itself is replaced, once."""
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
    """``sys.stdout`` while :func:`plugin_output_to_stderr` is in force: what the thread that
    turned it on writes goes to the real stdout; what any other thread writes (plugin code, which
    the CLI runs in worker threads, and the threads plugins start) goes to stderr."""

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
    """While in force, what other threads than this one write to ``sys.stdout`` goes to
    ``sys.stderr`` (see :class:`_StdoutRouter`); ``sys.stdout`` is put back afterwards, and put
    back again after each piece of plugin code that replaced it (:func:`keep_stdout`)."""
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


def _accelctl_variables() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in USER_CHOICES}


class watch_import:
    """Around a plugin's import: undo and report what it did to accelctl's configuration.

    **Choices:** ``ACCELCTL_*`` variables the import set, changed or removed are put back (they
    are the user's choice, read by accelctl when it selects). ``sys.path`` entries the import
    removed or reordered are put back in their places, with what the import added kept after
    them; entries it only added are kept where it put them (a vendor's package may need them).
    Either way a :class:`~accelctl._errors.PluginWarning` names the plugin.
    """

    __slots__ = ("_path", "_subject", "_variables")

    def __init__(self, subject: str) -> None:
        #: The plugin, as messages name it: ``"accelerator 'x' (acme-x 1.0)"``.
        self._subject = subject

    def __enter__(self) -> None:
        self._path = list(sys.path)
        self._variables = _accelctl_variables()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        changes = self._undo_variables() + self._undo_path()
        if changes:
            warnings.warn(
                f"{self._subject}: importing it {'; '.join(changes)}; report this to the "
                "plugin's authors",
                PluginWarning,
                stacklevel=2,
            )

    def _undo_variables(self) -> list[str]:
        changes = []
        for name, value in _accelctl_variables().items():
            before = self._variables[name]
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

    def _undo_path(self) -> list[str]:
        if sys.path == self._path:
            return []
        before = self._path
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

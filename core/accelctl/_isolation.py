"""What a plugin's code may not do to accelctl: raise through it, write on its stdout, or steer
its configuration.

Every piece of plugin code (its import, its class's instantiation, its registration, each hook
call) runs inside :class:`plugin_code`:

- An exception the plugin raises stays the plugin's failure. ``Exception`` passes through for the
  caller to report; anything else (``SystemExit``, ``GeneratorExit``, a ``BaseException``
  subclass, a ``KeyboardInterrupt`` the plugin raised itself) is turned into a
  :class:`PluginAbort`, an ordinary ``Exception``, so that it is reported like the others.
- A real Ctrl-C still stops the program. **Choice:** a ``KeyboardInterrupt`` is the user's when
  a SIGINT arrived while the plugin code ran. To know, in the main thread and while Python's
  default SIGINT handler is in force, accelctl puts in a handler that behaves the same (it raises
  ``KeyboardInterrupt``) and also counts the signal, and puts the default back afterwards. Python
  delivers signals only to the main thread, so in another thread (a hook run under a deadline,
  say) every ``KeyboardInterrupt`` is the plugin's. Where the program has a SIGINT handler of its
  own, accelctl cannot tell and lets every ``KeyboardInterrupt`` through.
- While :func:`plugin_output_to_stderr` is in force (the CLI turns it on for each command),
  what plugin code writes to ``sys.stdout`` goes to ``sys.stderr``, so ``--json`` output stays
  one clean document; so does whatever threads other than the command's write (hooks run in
  worker threads, threads a plugin started). **Choice:** this is the CLI's, not the library's:
  ``sys.stdout`` belongs to the whole process, and a library that rerouted it would move the
  prints of the program's other threads too.

:class:`watch_import` wraps a plugin's import: a plugin whose import changes ``sys.path`` or one
of accelctl's ``ACCELCTL_*`` variables is named in a :class:`~accelctl._errors.PluginWarning`, and
the change is undone (see its docstring).

What no in-process guard can stop: ``os._exit()``, a crash in native code, writes to file
descriptor 1 that bypass ``sys.stdout``, and what threads the plugin starts do besides printing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any, TextIO, cast

from ._errors import PluginWarning
from ._project import ENV_VARIABLES
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


# -- Ctrl-C -------------------------------------------------------------------------------------

try:
    # The C functions that signal.getsignal() and signal.signal() wrap: the wrappers' conversion
    # of a handler to an enum costs tens of microseconds when it is a function (measured on a
    # loaded machine), and this runs around every hook call.
    from _signal import (  # type: ignore[import-not-found,unused-ignore]
        getsignal as _getsignal,
    )
    from _signal import (  # type: ignore[import-not-found,unused-ignore]
        signal as _setsignal,
    )
except ImportError:  # another Python implementation
    _getsignal = signal.getsignal
    _setsignal = signal.signal

_sigints = 0  # SIGINTs received while the counting handler was in place


def _in_main_thread() -> bool:
    # Where Python runs signal handlers, and the only thread that may install one.
    return threading.get_ident() == threading.main_thread().ident


def _count_sigint(signum: int, frame: FrameType | None) -> None:
    """Python's default SIGINT behaviour (raise ``KeyboardInterrupt``), counted."""
    global _sigints
    _sigints += 1
    raise KeyboardInterrupt


def _restore_default_handler(swapped: bool) -> None:
    # Only where the counting handler is still in place: a handler that plugin code (a vendor's
    # runtime) installed meanwhile is left alone.
    if swapped and _getsignal(signal.SIGINT) is _count_sigint:
        _setsignal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def counting_interrupts() -> Iterator[None]:
    """Keep the counting SIGINT handler in place for a while (the CLI: a whole command), so that
    :class:`plugin_code` need not put it in and take it out around each call. Does nothing
    outside the main thread or where the program has a SIGINT handler of its own."""
    swapped = _in_main_thread() and _getsignal(signal.SIGINT) is signal.default_int_handler
    if swapped:
        _setsignal(signal.SIGINT, _count_sigint)
    try:
        yield
    finally:
        _restore_default_handler(swapped)


# -- stdout -------------------------------------------------------------------------------------

_local = threading.local()  # .depth: how many plugin_code sections this thread is inside


def _in_plugin_code() -> bool:
    return bool(getattr(_local, "depth", 0))


class _StdoutRouter:
    """``sys.stdout`` while :func:`plugin_output_to_stderr` is in force: what the thread that
    turned it on writes outside plugin code goes to the real stdout; what plugin code writes,
    and whatever any other thread writes (a hook run in a worker thread under a deadline, a
    thread the plugin started, one left running past its deadline), goes to stderr."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self._stdout = stdout
        self._stderr = stderr  # kept: a plugin that rebinds sys.stderr cannot loop it back here
        self._owner = threading.get_ident()

    def _target(self) -> TextIO:
        if threading.get_ident() == self._owner and not _in_plugin_code():
            return self._stdout
        return self._stderr

    def write(self, text: str) -> int:
        return self._target().write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        self._target().writelines(lines)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, buffer, fileno...
        return getattr(self._target(), name)


_router: _StdoutRouter | None = None


@contextmanager
def plugin_output_to_stderr() -> Iterator[None]:
    """While in force, what plugin code writes to ``sys.stdout`` goes to ``sys.stderr`` (see
    :class:`_StdoutRouter`); ``sys.stdout`` is put back afterwards."""
    global _router
    if _router is not None:  # already in force
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


class plugin_code:
    """Run plugin code contained (see the module's docstring)::

        with plugin_code():
            value = caller(**kwargs)

    :raises PluginAbort: for a ``BaseException`` the plugin raised that is not an ``Exception``
        (its ``KeyboardInterrupt`` included); a real Ctrl-C passes through unchanged.
    """

    __slots__ = ("_interrupts", "_sigints_before", "_swapped")

    def __enter__(self) -> None:
        # Whose is a KeyboardInterrupt: "counted" (the user's when a SIGINT was counted),
        # "plugin" (no signal can raise one here) or "unknown" (the program's own handler).
        self._interrupts = "plugin"
        self._swapped = False
        if _in_main_thread():
            handler = _getsignal(signal.SIGINT)
            if handler is signal.default_int_handler:
                _setsignal(signal.SIGINT, _count_sigint)
                self._swapped = True
                self._interrupts = "counted"
            elif handler is _count_sigint:  # nested: the outer guard put it there
                self._interrupts = "counted"
            elif handler not in (signal.SIG_IGN, signal.SIG_DFL, None):
                self._interrupts = "unknown"
        self._sigints_before = _sigints
        _local.depth = getattr(_local, "depth", 0) + 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _local.depth -= 1
        if _router is not None and sys.stdout is not _router:
            sys.stdout = cast(TextIO, _router)  # undo a plugin's own replacement of sys.stdout
        _restore_default_handler(self._swapped)
        if exc is None or isinstance(exc, Exception):
            return
        if isinstance(exc, KeyboardInterrupt) and self._users_interrupt():
            return
        raise PluginAbort(exc) from exc

    def _users_interrupt(self) -> bool:
        if self._interrupts == "unknown":  # the program's own handler: maybe a real Ctrl-C
            return True
        return self._interrupts == "counted" and _sigints != self._sigints_before


# -- imports ------------------------------------------------------------------------------------


def _accelctl_variables() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in ENV_VARIABLES}


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

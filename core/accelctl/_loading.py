"""Turning a plugin object into a validated, registered plugin, or a :class:`PluginLoadError`.

Each plugin gets a pluggy ``PluginManager`` of its own: a plugin that fails validation is
unregistered and its manager dropped, so nothing of it stays half registered, and calling one
plugin's hook never reaches another plugin.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from ._accelerator import Accelerator
from ._errors import PluginLoadError
from ._isolation import failure_text, original, plugin_code
from ._project import PROJECT_NAME
from ._text import FIELD_LIMIT, clean


class AcceleratorPluginManager(pluggy.PluginManager):
    """pluggy's manager with the accelctl hook specs, reading the methods of an
    :class:`~accelctl.Accelerator` subclass as hooks without markers."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)

    def parse_hookspec_opts(self, module_or_class: ModuleType | type, name: str) -> Any:
        # A manager per plugin parses the specs each time: look only at the hooks' own names
        # instead of every attribute of the hookspecs module (a third of the cost of a manager).
        if name not in hookspecs.ALL_HOOKS:
            return None
        return super().parse_hookspec_opts(module_or_class, name)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and isinstance(plugin, Accelerator) and name in hookspecs.ALL_HOOKS:
            return {}
        return opts


@dataclass(frozen=True)
class PluginOrigin:
    """Where a plugin comes from, for messages and for ``accelctl list``."""

    name: str
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None

    def describe(self) -> str:
        """``"accelerator 'hpu' (accelctl-hpu 1.0)"``, the subject of every message about it."""
        if self.distribution:
            version = f" {self.version}" if self.version else ""
            return f"accelerator {self.name!r} ({self.distribution}{version})"
        return f"accelerator {self.name!r}"


@dataclass(frozen=True)
class LoadedPlugin:
    """A registered plugin: its object, its own plugin manager and where it came from."""

    origin: PluginOrigin
    plugin: object
    manager: AcceleratorPluginManager

    def implements(self, hook: str) -> bool:
        """True when the plugin implements ``hook``."""
        caller = getattr(self.manager.hook, hook, None)
        return bool(caller is not None and caller.get_hookimpls())


def instantiate(obj: object, origin: PluginOrigin) -> object:
    """Entry points may name a module, a class (instantiated with no arguments) or an instance."""
    if not inspect.isclass(obj):
        return obj
    try:
        with plugin_code():
            return obj()
    except Exception as exc:  # anything the plugin raised, its sys.exit() included
        raise PluginLoadError(
            f"{origin.describe()}: class {clean(obj.__name__, FIELD_LIMIT)} could not be "
            f"instantiated with no arguments: {failure_text(exc)}",
            name=origin.name,
            distribution=origin.distribution,
        ) from original(exc)


def register(plugin: object, origin: PluginOrigin) -> LoadedPlugin:
    """Register ``plugin`` in a fresh manager and check it against the hook specs.

    :raises PluginLoadError: for pluggy's validation errors, hooks accelctl does not know and
        required hooks that are missing; the plugin is unregistered first.
    """
    manager = AcceleratorPluginManager()

    def fail(problem: str, cause: BaseException | None = None) -> PluginLoadError:
        if manager.is_registered(plugin):
            manager.unregister(plugin)
        error = PluginLoadError(
            f"{origin.describe()}: {problem}",
            name=origin.name,
            distribution=origin.distribution,
        )
        error.__cause__ = cause
        return error

    try:
        # pluggy reads every attribute of the plugin, and so may run its code (a property)
        with plugin_code():
            manager.register(plugin, name=origin.name)
            diagnosis = diagnose(manager, plugin)
    except pluggy.PluginValidationError as exc:
        raise fail(clean(str(exc)), exc) from exc
    except ValueError as exc:  # pluggy: already registered
        raise fail(clean(str(exc)), exc) from exc
    except Exception as exc:  # the plugin's attributes raised while pluggy read them
        raise fail(f"registering it failed: {failure_text(exc)}") from original(exc)
    if diagnosis.unknown:
        raise fail(diagnosis.unknown_message())
    if diagnosis.missing:
        raise fail(diagnosis.missing_message())
    return LoadedPlugin(origin=origin, plugin=plugin, manager=manager)


@dataclass(frozen=True)
class HookDiagnosis:
    """Which hooks a registered plugin implements, which it lacks, which accelctl does not know."""

    implemented: tuple[str, ...]
    unknown: tuple[str, ...]
    missing: tuple[str, ...]
    #: Required hooks the plugin defines as plain functions, without ``@accelctl.hookimpl``.
    unmarked: tuple[str, ...]

    def unknown_message(self) -> str:
        """``unknown hook(s) 'detcet' (did you mean 'detect'?); accelctl's hooks are ...``"""
        parts = []
        for name in self.unknown:
            close = difflib.get_close_matches(name, hookspecs.ALL_HOOKS, n=1)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return (
            f"unknown hook(s) {', '.join(parts)}; accelctl's hooks are "
            f"{', '.join(hookspecs.ALL_HOOKS)}"
        )

    def missing_message(self) -> str:
        """``missing required hook(s) ...`` with what to do about it."""
        if self.unmarked:
            hint = f"{', '.join(self.unmarked)} defined but not marked with @accelctl.hookimpl"
        else:
            hint = (
                "mark module functions with @accelctl.hookimpl or subclass accelctl.Accelerator; "
                f"required: {', '.join(hookspecs.REQUIRED_HOOKS)}"
            )
        return f"missing required hook(s) {', '.join(self.missing)}; {hint}"


def diagnose(manager: pluggy.PluginManager, plugin: object) -> HookDiagnosis:
    """Inspect a plugin registered in ``manager`` (by :func:`register` and by the conformance
    checks, so both say the same thing)."""
    callers = manager.get_hookcallers(plugin) or []
    implemented = tuple(caller.name for caller in callers if caller.has_spec())
    missing = tuple(hook for hook in hookspecs.REQUIRED_HOOKS if hook not in implemented)
    return HookDiagnosis(
        implemented=implemented,
        unknown=tuple(sorted(caller.name for caller in callers if not caller.has_spec())),
        missing=missing,
        unmarked=tuple(hook for hook in missing if callable(getattr(plugin, hook, None))),
    )


def load_object(obj: object, origin: PluginOrigin) -> LoadedPlugin:
    """Instantiate (for a class) and register a plugin object.

    An :class:`~accelctl.Accelerator` learns its canonical name from ``origin``, so its default
    hooks name the accelerator as the registry does (the entry point's name, not the class's).
    """
    return register(bind_name(instantiate(obj, origin), origin), origin)


def bind_name(plugin: object, origin: PluginOrigin) -> object:
    """Tell an :class:`~accelctl.Accelerator` installed by an entry point its canonical name
    (the entry point's, not the class's); return the plugin."""
    if isinstance(plugin, Accelerator) and origin.entry_point is not None:
        plugin.bind_entry_point(origin.name)
    return plugin

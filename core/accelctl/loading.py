"""Turning a plugin object into a validated, registered plugin, or a :class:`PluginLoadError`.

Each plugin gets a pluggy ``PluginManager`` of its own: a plugin that fails validation is
unregistered and its manager dropped, so nothing of it stays half registered, and calling one
plugin's hook never reaches another plugin.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from ._project import PROJECT_NAME
from .accelerator import Accelerator
from .errors import PluginLoadError


class AcceleratorPluginManager(pluggy.PluginManager):
    """pluggy's manager with the accelctl hook specs, reading the methods of an
    :class:`~accelctl.Accelerator` subclass as hooks without markers."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)

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
        return obj()
    except Exception as exc:
        raise PluginLoadError(
            f"{origin.describe()}: class {obj.__name__} could not be instantiated with no "
            f"arguments: {type(exc).__name__}: {exc}",
            name=origin.name,
            distribution=origin.distribution,
        ) from exc


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
        manager.register(plugin, name=origin.name)
    except pluggy.PluginValidationError as exc:
        raise fail(" ".join(str(exc).split()), exc) from exc
    except ValueError as exc:  # pluggy: already registered
        raise fail(str(exc), exc) from exc

    unknown = sorted(
        caller.name for caller in manager.get_hookcallers(plugin) or () if not caller.has_spec()
    )
    if unknown:
        raise fail(_unknown_hooks_message(unknown))
    missing = [hook for hook in hookspecs.REQUIRED_HOOKS if not _has_impl(manager, hook)]
    if missing:
        raise fail(
            f"required hook(s) {', '.join(missing)} not implemented (required: "
            f"{', '.join(hookspecs.REQUIRED_HOOKS)}; mark module functions with "
            "@accelctl.hookimpl or subclass accelctl.Accelerator)"
        )
    return LoadedPlugin(origin=origin, plugin=plugin, manager=manager)


def _has_impl(manager: AcceleratorPluginManager, hook: str) -> bool:
    return bool(getattr(manager.hook, hook).get_hookimpls())


def _unknown_hooks_message(unknown: list[str]) -> str:
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, hookspecs.ALL_HOOKS, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"unknown hook(s) {', '.join(parts)}; accelctl's hooks are {', '.join(hookspecs.ALL_HOOKS)}"
    )


def load_object(obj: object, origin: PluginOrigin) -> LoadedPlugin:
    """Instantiate (for a class) and register a plugin object."""
    return register(instantiate(obj, origin), origin)

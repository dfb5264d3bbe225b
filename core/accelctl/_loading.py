"""From a plugin object to the table of its hook functions, validated once by pluggy.

accelctl calls one plugin's hook at a time, which pluggy's callers do not offer; so a plugin is
registered in one shared ``PluginManager`` once, checked, its hook functions copied into a plain
table, and unregistered again (docs/concepts.md section 2a, "pluggy along its grain").
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import FunctionType, ModuleType
from typing import Any, NamedTuple

import pluggy

from . import hookspecs
from ._accelerator import Accelerator
from ._errors import PluginLoadError
from ._isolation import failure_text
from ._project import PROJECT_NAME
from ._text import FIELD_LIMIT, clean

#: The attribute in which ``@accelctl.hookimpl`` leaves its options on a function (pluggy's).
_MARKER = f"{PROJECT_NAME}_impl"
#: The hooks that take an argument.
_ARGUMENT = frozenset({"parse_devices", "get_parallel_devices", "device_stats", "setup_device"})


class _Specs(pluggy.PluginManager):
    """pluggy's manager with accelctl's hook specs; the methods of an
    :class:`~accelctl.Accelerator` subclass named after hooks are hooks without markers."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        if isinstance(plugin, ModuleType):
            # A module's hooks are its marked functions, read from its namespace as pluggy's
            # static look-up would (which, over every attribute, was most of a plugin's load);
            # its other attributes (imports, constants, classes) can be no hook.
            value = vars(plugin).get(name)
            if isinstance(value, FunctionType):
                opts = getattr(value, _MARKER, None)
                return opts if isinstance(opts, dict) else None
            if not inspect.isroutine(value):
                return None
        elif isinstance(plugin, Accelerator) and name not in vars(plugin):
            # A class plugin's methods, read from its classes' namespaces: pluggy's static
            # look-up of each of an instance's ~50 attributes through the ABC metaclass made a
            # class plugin several times slower to load than a module (python -m bench
            # --sections scaling). What pluggy then verifies is unchanged.
            value = next(
                (vars(cls)[name] for cls in type(plugin).__mro__ if name in vars(cls)), None
            )
            if isinstance(value, FunctionType):
                opts = getattr(value, _MARKER, None)
                if isinstance(opts, dict):
                    return opts
                return {} if name in hookspecs.ALL_HOOKS else None
            if not isinstance(value, (staticmethod, classmethod)):
                return None  # data, properties, object's own slots: no hook
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and isinstance(plugin, Accelerator) and name in hookspecs.ALL_HOOKS:
            return {}
        return opts


@functools.cache
def _manager() -> _Specs:
    return _Specs()


class HookDiagnosis(NamedTuple):
    """Which hooks a plugin implements, which it lacks, which accelctl does not know: what the
    conformance checks report (:func:`diagnose`); loading keeps only its verdict."""

    implemented: tuple[str, ...]
    unknown: tuple[str, ...]
    missing: tuple[str, ...]
    #: Required hooks the plugin defines as plain functions, without ``@accelctl.hookimpl``.
    unmarked: tuple[str, ...]
    #: Hooks marked as wrappers, which a direct call cannot honour.
    wrappers: tuple[str, ...] = ()

    def unknown_message(self) -> str | None:
        """``unknown hook(s) 'detcet' (did you mean 'detect'?); ...``, or None."""
        return _unknown_message(self.unknown)

    def missing_message(self) -> str | None:
        """``missing required hook(s) ...`` with what to do about it, or None."""
        return _missing_message(self.missing, self.unmarked)

    def wrappers_message(self) -> str | None:
        """Why wrappers are refused, or None."""
        return _wrappers_message(self.wrappers)

    def problem(self) -> str | None:
        """The first thing that keeps the plugin from loading, in words; None when none."""
        return self.unknown_message() or self.missing_message() or self.wrappers_message()


def _unknown_message(unknown: tuple[str, ...]) -> str | None:
    if not unknown:
        return None
    import difflib  # errors only: not on the start-up path

    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, hookspecs.ALL_HOOKS, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"unknown hook(s) {', '.join(parts)}; accelctl's hooks are {', '.join(hookspecs.ALL_HOOKS)}"
    )


def _missing_message(missing: tuple[str, ...], unmarked: tuple[str, ...]) -> str | None:
    if not missing:
        return None
    if unmarked:
        hint = f"{', '.join(unmarked)} defined but not marked with @accelctl.hookimpl"
    else:
        hint = (
            "mark module functions with @accelctl.hookimpl or subclass accelctl.Accelerator; "
            f"required: {', '.join(hookspecs.REQUIRED_HOOKS)}"
        )
    return f"missing required hook(s) {', '.join(missing)}; {hint}"


def _wrappers_message(wrappers: tuple[str, ...]) -> str | None:
    if not wrappers:
        return None
    return (
        f"hook(s) {', '.join(wrappers)} are marked as wrappers; accelctl calls a "
        "plugin's own hook directly, so mark them with a plain @accelctl.hookimpl"
    )


def instantiate(obj: object, subject: str) -> object:
    """The plugin an entry point names: a module, a class (instantiated with no arguments) or an
    instance; ``subject`` names it in messages."""
    if not inspect.isclass(obj):
        return obj
    try:
        return obj()
    except BaseException as exc:  # anything the plugin raised, its sys.exit() included
        raise PluginLoadError(
            f"{subject}: class {clean(obj.__name__, FIELD_LIMIT)} could not be instantiated with "
            f"no arguments: {failure_text(exc)}"
        ) from exc


def hook_table(plugin: object, subject: str) -> dict[str, Callable[..., Any]]:
    """Validate ``plugin`` and take its hook functions into a plain table; ``subject`` names it in
    the error. Callers hold :func:`accelctl._fanout.one_at_a_time` (the manager is shared).

    :raises PluginLoadError: pluggy refuses it, reading its attributes raised, or a hook is
        unknown, missing or a wrapper.
    """
    impls = _registered(plugin, subject)
    missing = tuple(hook for hook in hookspecs.REQUIRED_HOOKS if hook not in impls)
    try:
        unmarked = _unmarked(plugin, missing)
    except BaseException as exc:  # reading an unmarked hook's attribute ran the plugin's code
        raise _error(subject, f"registering it failed: {failure_text(exc)}") from exc
    problem = (
        _unknown_message(tuple(sorted(name for name in impls if name not in hookspecs.ALL_HOOKS)))
        or _missing_message(missing, unmarked)
        or _wrappers_message(_wrappers(impls))
    )
    if problem is not None:
        raise _error(subject, problem)
    table: dict[str, Callable[..., Any]] = {}
    for name, impl in impls.items():
        function = impl.function
        if name in _ARGUMENT and not impl.argnames:  # pluggy allows fewer parameters
            table[name] = lambda _argument, _function=function: _function()
        else:
            table[name] = function
    return table


def diagnose(plugin: object) -> HookDiagnosis | None:
    """The plugin's :class:`HookDiagnosis`, pluggy asked again (the conformance checks' detail);
    None where pluggy refuses it or reading its attributes raises. Callers hold
    :func:`accelctl._fanout.one_at_a_time`."""
    try:
        impls = _registered(plugin, "")
        missing = tuple(hook for hook in hookspecs.REQUIRED_HOOKS if hook not in impls)
        return HookDiagnosis(
            implemented=tuple(name for name in impls if name in hookspecs.ALL_HOOKS),
            unknown=tuple(sorted(name for name in impls if name not in hookspecs.ALL_HOOKS)),
            missing=missing,
            unmarked=_unmarked(plugin, missing),
            wrappers=_wrappers(impls),
        )
    except BaseException:
        return None


def _error(subject: str, problem: str) -> PluginLoadError:
    return PluginLoadError(f"{subject}: {problem}")


def _registered(plugin: object, subject: str) -> dict[str, Any]:
    """pluggy's ``HookImpl`` of each hook of ``plugin``, by hook name: registered in the shared
    manager, read, and unregistered again."""
    manager = _manager()
    try:
        # pluggy reads every attribute of the plugin, and so may run its code (a property)
        manager.register(plugin)
    except BaseException as exc:
        if manager.is_registered(plugin):  # pluggy leaves a refused plugin half registered
            manager.unregister(plugin)
        if isinstance(exc, (pluggy.PluginValidationError, ValueError)):  # ValueError: twice
            raise _error(subject, clean(str(exc))) from exc
        # the plugin's attributes raised while pluggy read them
        raise _error(subject, f"registering it failed: {failure_text(exc)}") from exc
    try:
        callers = manager.get_hookcallers(plugin) or []
        return {caller.name: caller.get_hookimpls()[0] for caller in callers}
    finally:
        manager.unregister(plugin)


def _unmarked(plugin: object, missing: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(hook for hook in missing if callable(getattr(plugin, hook, None)))


def _wrappers(impls: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        name
        for name, impl in impls.items()
        if getattr(impl, "wrapper", False) or getattr(impl, "hookwrapper", False)
    )


def name_of(obj: object) -> str:
    """The name of a plugin object that has no entry point, the one rule for it: an
    :class:`~accelctl.Accelerator`'s :attr:`~accelctl.Accelerator.accelerator_name` (its class's
    too), else the object's ``name`` or ``__name__`` attribute, else its type's name; lowercase."""
    if isinstance(obj, Accelerator):
        return obj.accelerator_name
    if inspect.isclass(obj) and issubclass(obj, Accelerator):
        return (obj.name or obj.__name__.removesuffix("Accelerator").lower() or "custom").lower()
    name = getattr(obj, "name", "") or getattr(obj, "__name__", "") or type(obj).__name__
    return str(name).lower() if isinstance(name, str) else type(obj).__name__.lower()

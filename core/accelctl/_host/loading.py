"""From a plugin object to the table of its hook functions, checked once, at load.

accelctl calls one plugin's hook at a time, as a plain call; it never broadcasts a hook to every
plugin. So :mod:`accelctl.hookspecs` is the typed contract, and a plugin is checked against it
here (each marked name a known hook, no parameter its specification lacks, no wrapper, the
required hooks present) instead of being registered in a pluggy ``PluginManager`` per plugin,
which measured 11 times the load and 7 times each call
(docs/design/hooks-without-plugin-manager.md). pluggy's markers stay the contract's:
``@accelctl.hookimpl`` marks a module's functions.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, NamedTuple

import pluggy

from .. import hookspecs
from .._base.project import PROJECT_NAME
from .._base.text import FIELD_LIMIT, clean
from .._contract.accelerator import Accelerator
from .._contract.errors import PluginLoadError
from .isolation import failure_text

#: The attribute in which ``@accelctl.hookimpl`` leaves its options on a function (pluggy's).
_MARKER = f"{PROJECT_NAME}_impl"
#: The options a marker can give a hook (pluggy's ``HookimplOpts``).
_OPTIONS = ("wrapper", "hookwrapper", "optionalhook", "tryfirst", "trylast", "specname")
#: The hooks that take an argument.
_ARGUMENT = frozenset({"parse_devices", "get_parallel_devices", "device_stats", "setup_device"})


class _Impl(NamedTuple):
    """One hook of a plugin: its function, its required parameters and its marker's options.

    The function is bound, for a method; the parameters are those without a default; the options are
    ``{}`` for an unmarked method of an :class:`~accelctl.Accelerator` subclass."""

    function: Callable[..., Any]
    argnames: tuple[str, ...]
    opts: dict[str, Any]


@functools.cache
def _spec_arguments() -> dict[str, tuple[str, ...]]:
    """Each hook's parameters, from its specification in :mod:`accelctl.hookspecs`."""
    return {
        name: tuple(inspect.signature(getattr(hookspecs, name)).parameters)
        for name in hookspecs.ALL_HOOKS
    }


def _argnames(function: Callable[..., Any]) -> tuple[str, ...]:
    """Return the parameters a call must pass, as pluggy counts them.

    Those without a default, of a bound method without ``self``."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: no parameter to check
        return ()
    return tuple(
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    )


def _marked(value: object) -> dict[str, Any] | None:
    """The options ``@accelctl.hookimpl`` left on ``value``; None where it is not marked.

    pluggy's marker leaves a dict up to 1.7; pluggy's development branch leaves its public
    ``HookimplConfiguration`` instead, read here the same way where the installed pluggy has
    that type. Anything else in the attribute (an object that answers every attribute) is no
    mark."""
    # Read by hand, not with pluggy's PluginManager.parse_hookimpl_opts: that needs a manager,
    # and before pytest-dev/pluggy#701 (pluggy 1.7) it runs a plugin's properties, as pluggy
    # 1.5, our floor, does (docs/design/hooks-without-plugin-manager.md).
    opts = getattr(value, _MARKER, None)
    if isinstance(opts, dict):
        return opts
    configuration = getattr(pluggy, "HookimplConfiguration", None)
    if configuration is None or not isinstance(opts, configuration):
        return None
    return {name: getattr(opts, name) for name in _OPTIONS if hasattr(opts, name)}


def _found_hooks(plugin: object) -> Iterator[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """Return ``(name, function, options)`` of every hook ``plugin`` offers, one rule for all forms.

    A plugin is a module, an :class:`~accelctl.Accelerator` or any other object. Its hooks are
    the functions marked with ``@accelctl.hookimpl`` and, on an :class:`~accelctl.Accelerator`,
    each method named after a hook, marked or not. Attributes are read from the namespaces
    without running the plugin's code (a property or data named after a hook is no hook); a
    hook found is then bound as the plugin would call it.
    """
    accelerator = isinstance(plugin, Accelerator)
    seen: set[str] = set()
    for namespace in _namespaces(plugin):
        for name, value in list(namespace.items()):
            if name in seen:
                continue  # a nearer namespace has it
            seen.add(name)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if not inspect.isroutine(value):
                continue
            opts = _marked(value)
            if opts is None and not (accelerator and name in hookspecs.ALL_HOOKS):
                continue
            yield name, getattr(plugin, name), opts or {}


def _namespaces(plugin: object) -> Iterator[Mapping[str, Any]]:
    """Return where ``plugin``'s attributes are found, the nearest first.

    Its own (a module's are all it has), then each of its class's (what
    :func:`inspect.getattr_static` walks, read once)."""
    own = getattr(plugin, "__dict__", None)
    if isinstance(own, dict):
        yield own
    if not isinstance(plugin, ModuleType):
        for cls in type(plugin).__mro__[:-1]:  # object's own slots are no hooks
            yield vars(cls)


class HookDiagnosis(NamedTuple):
    """Which hooks a plugin implements, which it lacks, and which accelctl does not know.

    What the conformance checks report (:func:`diagnose`); loading keeps only its verdict."""

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
    """Return the plugin an entry point names, instantiating a class.

    A module, a class (instantiated with no arguments) or an instance; ``subject`` names it in
    messages."""
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
    """Validate ``plugin`` and take its hook functions into a plain table.

    ``subject`` names it in the error.

    :raises PluginLoadError: reading its attributes raised, or a hook is unknown, missing, a
        wrapper, or takes a parameter its specification does not have.
    """
    impls, diagnosis = _read(plugin, subject)
    problem = diagnosis.problem()
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
    """Return the plugin's :class:`HookDiagnosis`, read again; None where it cannot be read.

    The conformance checks' detail; None where a hook takes a parameter its specification lacks or
    reading its attributes raises."""
    try:
        return _read(plugin, "")[1]
    except PluginLoadError:
        return None


def _error(subject: str, problem: str) -> PluginLoadError:
    return PluginLoadError(f"{subject}: {problem}")


def _read(plugin: object, subject: str) -> tuple[dict[str, _Impl], HookDiagnosis]:
    """Read each hook ``plugin`` offers, checked against its specification.

    Returns the hooks by name and what the plugin implements, lacks or offers that accelctl
    does not know; ``subject`` names the plugin in the error. Reading its attributes may run its
    code (a required hook left unmarked is looked up to say so): whatever that raises is the
    plugin's failure to register.

    :raises PluginLoadError: reading its attributes raised, or a hook takes a parameter its
        specification does not have.
    """
    try:
        impls = _checked(_found_hooks(plugin), subject)
        missing = tuple(hook for hook in hookspecs.REQUIRED_HOOKS if hook not in impls)
        unmarked = _unmarked(plugin, missing)
    except PluginLoadError:
        raise
    except BaseException as exc:  # anything the plugin's code raised, its sys.exit() included
        raise _error(subject, f"registering it failed: {failure_text(exc)}") from exc
    return impls, HookDiagnosis(
        implemented=tuple(name for name in hookspecs.ALL_HOOKS if name in impls),
        unknown=tuple(sorted(name for name in impls if name not in hookspecs.ALL_HOOKS)),
        missing=missing,
        unmarked=unmarked,
        wrappers=_wrappers(impls),
    )


def _checked(
    found: Iterator[tuple[str, Callable[..., Any], dict[str, Any]]], subject: str
) -> dict[str, _Impl]:
    """Return the hooks found, by name, each checked against its specification.

    An unknown name is kept for the caller to name.

    :raises PluginLoadError: a hook takes a parameter its specification does not have.
    """
    specs = _spec_arguments()
    impls: dict[str, _Impl] = {}
    for name, function, opts in found:
        argnames = _argnames(function)
        spec = specs.get(name)
        extra = [arg for arg in argnames if spec is not None and arg not in spec]
        if extra:
            raise _error(
                subject,
                f"hook {name}() takes {', '.join(repr(arg) for arg in extra)}, which its "
                f"specification does not have (accelctl.hookspecs.{name}"
                f"({', '.join(spec or ())})); a hook may take fewer parameters, never others",
            )
        impls[name] = _Impl(function, argnames, opts)
    return impls


def _unmarked(plugin: object, missing: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(hook for hook in missing if callable(getattr(plugin, hook, None)))


def _wrappers(impls: dict[str, _Impl]) -> tuple[str, ...]:
    return tuple(
        name
        for name, impl in impls.items()
        if impl.opts.get("wrapper") or impl.opts.get("hookwrapper")
    )


def name_of(obj: object) -> str:
    """Return the name of a plugin object that has no entry point.

    The one rule for it: an :class:`~accelctl.Accelerator`'s
    :attr:`~accelctl.Accelerator.accelerator_name` (its class's too), else the object's ``name`` or
    ``__name__`` attribute, else its type's name; lowercase."""
    if isinstance(obj, Accelerator):
        return obj.accelerator_name
    if inspect.isclass(obj) and issubclass(obj, Accelerator):
        return (obj.name or obj.__name__.removesuffix("Accelerator").lower() or "custom").lower()
    name = getattr(obj, "name", "") or getattr(obj, "__name__", "") or type(obj).__name__
    return str(name).lower() if isinstance(name, str) else type(obj).__name__.lower()

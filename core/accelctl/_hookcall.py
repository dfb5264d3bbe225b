"""The one place that calls a plugin's hook and checks what it returns.

A plugin's exception (any ``BaseException`` but a real Ctrl-C: see :mod:`accelctl._isolation`),
or a value its hook specification does not allow, becomes a
:class:`~accelctl._errors.PluginHookError` naming the plugin, its distribution and the hook. A
:class:`~accelctl.DeviceSpecError` from ``parse_devices`` / ``get_parallel_devices`` is the
contract's own answer to a bad spec and passes through unchanged. A hook that does not answer
within the deadline (``ACCELCTL_HOOK_TIMEOUT``, see :mod:`accelctl._deadline`) is a
``PluginHookError`` too, and the plugin's later hook calls fail at once with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ._deadline import HookTimeoutError, guard
from ._devices import MAX_DEVICE_COUNT
from ._errors import DeviceSpecError, PluginHookError
from ._info import AcceleratorInfo
from ._isolation import failure_text, original, plugin_code
from ._loading import LoadedPlugin
from ._text import clean, safe_repr, safe_str


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected a bool")
    return value


def _check_count(value: Any) -> int:
    if not _is_int(value) or not 0 <= value <= MAX_DEVICE_COUNT:
        raise TypeError(f"expected a non-negative int (at most {MAX_DEVICE_COUNT})")
    return int(value)


def _check_parsed(value: Any) -> int | list[int]:
    if _is_int(value) and 1 <= value <= MAX_DEVICE_COUNT:
        return int(value)
    if (
        isinstance(value, list)
        and 0 < len(value) <= MAX_DEVICE_COUNT
        and all(_is_int(i) and 0 <= i < MAX_DEVICE_COUNT for i in value)
    ):
        return value
    raise TypeError(
        f"expected an int >= 1 or a non-empty list of non-negative ints (at most "
        f"{MAX_DEVICE_COUNT} devices, indices below {MAX_DEVICE_COUNT})"
    )


def _check_devices(value: Any) -> list[Any]:
    import torch  # the plugin returned torch objects, so torch is already imported

    if not isinstance(value, list) or not value:
        raise TypeError("expected a non-empty list of torch.device")
    for item in value:
        if not isinstance(item, torch.device):
            raise TypeError(f"expected a list of torch.device, found {type(item).__name__}")
    return value


def _check_stats(value: Any) -> dict[str, int | float]:
    if not isinstance(value, dict):
        raise TypeError("expected a flat dict of str to int or float")
    for key, figure in value.items():
        if not isinstance(key, str):
            raise TypeError(f"expected str keys, found {safe_repr(key)}")
        if isinstance(figure, bool) or not isinstance(figure, (int, float)):
            raise TypeError(
                f"expected int or float figures, found {safe_repr(key)}: {safe_repr(figure)} "
                f"({type(figure).__name__})"
            )
    return value


def _check_reason(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError("expected a str or None")
    return None if value is None else clean(value) or None


def _check_info(value: Any) -> AcceleratorInfo:
    return AcceleratorInfo.coerce(value)


#: Most facts one plugin may add to ``accelctl env``, and the longest key: a report, not a dump.
MAX_ENVIRONMENT_FACTS = 64
MAX_FACT_KEY = 64


def _check_facts(value: Any) -> dict[str, str | int | float | bool | None]:
    if not isinstance(value, dict):
        raise TypeError("expected a flat dict of str to str, int, float, bool or None")
    if len(value) > MAX_ENVIRONMENT_FACTS:
        raise TypeError(f"expected at most {MAX_ENVIRONMENT_FACTS} facts, found {len(value)}")
    facts: dict[str, str | int | float | bool | None] = {}
    for key, fact in value.items():
        if not isinstance(key, str) or not clean(key) or len(key) > MAX_FACT_KEY:
            raise TypeError(
                f"expected non-empty str keys of at most {MAX_FACT_KEY} characters, found "
                f"{safe_repr(key)}"
            )
        if fact is not None and not isinstance(fact, (str, int, float, bool)):
            raise TypeError(
                f"expected str, int, float, bool or None values, found {safe_repr(key)}: "
                f"{safe_repr(fact)} ({type(fact).__name__})"
            )
        # Plugins' text reaches a terminal: one printable line each.
        facts[clean(key)] = clean(fact) if isinstance(fact, str) else fact
    return facts


def _ignore(value: Any) -> None:
    return None


#: How each hook's return value is checked and normalised.
RETURN_CHECKS: dict[str, Callable[[Any], Any]] = {
    "detect": _check_bool,
    "auto_device_count": _check_count,
    "parse_devices": _check_parsed,
    "get_parallel_devices": _check_devices,
    "device_stats": _check_stats,
    "unavailable_reason": _check_reason,
    "accelerator_info": _check_info,
    "setup_device": _ignore,
    "teardown": _ignore,
    "environment_info": _check_facts,
}

_PASS_THROUGH: dict[str, tuple[type[BaseException], ...]] = {
    "parse_devices": (DeviceSpecError,),
    "get_parallel_devices": (DeviceSpecError,),
}


def _fill_parts(exc: BaseException, name: str, kwargs: dict[str, Any]) -> None:
    """A plugin may raise ``DeviceSpecError("message")`` alone: fill in what accelctl knows."""
    if isinstance(exc, DeviceSpecError):
        if exc.accelerator is None:
            exc.accelerator = name
        if exc.spec is None:
            exc.spec = kwargs.get("devices")


#: Hooks that act on the calling thread's device state (a current device is per thread), so they
#: run in the caller's thread, without a deadline.
_IN_CALLER_THREAD = frozenset({"setup_device", "teardown"})
#: Plugins (by their manager) with a hook call still running past its deadline, and that error.
_UNANSWERED: weakref.WeakKeyDictionary[object, PluginHookError] = weakref.WeakKeyDictionary()


def _unanswered(plugin: LoadedPlugin, hook: str, seconds: float) -> PluginHookError:
    origin = plugin.origin
    error = PluginHookError(
        f"{origin.describe()}: {hook}() did not answer within {seconds:g} s (the deadline of a "
        f"hook call; ACCELCTL_HOOK_TIMEOUT changes it); the plugin is treated as broken",
        name=origin.name,
        hook=hook,
        distribution=origin.distribution,
    )
    _UNANSWERED.setdefault(plugin.manager, error)
    return error


def _run(plugin: LoadedPlugin, hook: str, caller: Any, kwargs: dict[str, Any]) -> Any:
    """The hook call itself: under the deadline, except for the per-thread ones."""
    if hook in _IN_CALLER_THREAD:
        return caller(**kwargs)
    stuck = _UNANSWERED.get(plugin.manager) if _UNANSWERED else None
    if stuck is not None:  # its thread is still busy: do not stack up another one
        raise PluginHookError(
            f"{stuck}; {hook}() was not called",
            name=stuck.name,
            hook=hook,
            distribution=stuck.distribution,
        )
    return guard(lambda: caller(**kwargs), on_timeout=lambda s: _unanswered(plugin, hook, s))


def call_hook(plugin: LoadedPlugin, hook: str, **kwargs: Any) -> Any:
    """Call ``hook`` of this one plugin and return its checked value.

    :raises PluginHookError: when the hook raised, returned a value its spec does not allow, or
        did not answer within the deadline.
    :raises DeviceSpecError: from ``parse_devices`` / ``get_parallel_devices``, unchanged.
    """
    origin = plugin.origin
    caller = getattr(plugin.manager.hook, hook)
    try:
        with plugin_code():
            value = _run(plugin, hook, caller, kwargs)
    except (PluginHookError, HookTimeoutError):  # the deadline's, or its setting's
        raise
    except _PASS_THROUGH.get(hook, ()) as exc:
        _fill_parts(exc, origin.name, kwargs)
        raise
    except Exception as exc:  # anything the plugin raised, its sys.exit() included
        raise PluginHookError(
            f"{origin.describe()}: hook {hook}() raised {failure_text(exc)}",
            name=origin.name,
            hook=hook,
            distribution=origin.distribution,
        ) from original(exc)
    try:
        return RETURN_CHECKS[hook](value)
    except Exception as exc:  # TypeError/ValueError from the checks, or the value's own
        raise PluginHookError(
            f"{origin.describe()}: hook {hook}() returned {safe_repr(value)} "
            f"({type(value).__name__}); {clean(safe_str(exc))}",
            name=origin.name,
            hook=hook,
            distribution=origin.distribution,
        ) from exc

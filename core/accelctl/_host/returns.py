"""What each hook may return: one check per hook, which also normalises the value.

A check raises a ``TypeError`` saying what was expected (the handle names the plugin and hook).
Strict: ``True`` is not a device count and a ``bool`` is not a figure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._base.project import MAX_DEVICE_COUNT
from .._base.text import clean, safe_repr
from .._contract.info import AcceleratorInfo
from .._contract.kernel_gaps import KernelGaps
from .._contract.peak import DevicePeak


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


#: How each hook's return value is checked and normalised.
RETURN_CHECKS: dict[str, Callable[[Any], Any]] = {
    "detect": _check_bool,
    "auto_device_count": _check_count,
    "parse_devices": _check_parsed,
    "get_parallel_devices": _check_devices,
    "device_stats": _check_stats,
    "unavailable_reason": _check_reason,
    "accelerator_info": AcceleratorInfo.coerce,
    "setup_device": lambda value: None,
    "teardown": lambda value: None,
    "environment_info": _check_facts,
    "device_peak": DevicePeak.coerce,
    "kernel_gaps": KernelGaps.coerce,
}

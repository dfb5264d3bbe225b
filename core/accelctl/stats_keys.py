"""The vocabulary of ``device_stats``: the common keys, their units, the rules every key follows.

A reading is a flat ``dict`` of ``str`` to ``int`` or ``float``. Its keys follow two rules:

- **A unit in the key's suffix** (:data:`UNIT_SUFFIXES`): ``_bytes``, ``_percent`` (0 to 100),
  ``_watts``, ``_celsius``, ``_hz``, ``_per_second``, ``_calls`` (a count of calls); no suffix
  means a plain count or ratio.
- **Common or prefixed**: a key without a dot is one of :data:`VOCABULARY`, the same figure on
  every accelerator, so that one dashboard reads them all; anything else is the accelerator's
  own, prefixed with its name and a dot (``cuda.power_limit_watts``, ``mps.recommended_max_
  memory_bytes``), and follows the suffix rule too.

**Not supported and not available now.** A key that is absent is a figure this accelerator (or
this device) does not report: not supported, or nothing to say. A figure it does report but could
not read at this reading (a sensor that failed once) is ``float("nan")``: present, not a number
now. ``metrics.jsonl`` writes it as ``null``; :func:`problems` skips its range checks.

Imports nothing heavy: ``accelctl stats``, the exporters and the conformance kit read it without
torch (docs/concepts.md section 7).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: suffix -> unit, the unit of every key that ends with the suffix (longest suffix first).
UNIT_SUFFIXES: dict[str, str] = {
    "_per_second": "per second",
    "_bytes": "bytes",
    "_percent": "percent",
    "_watts": "watts",
    "_celsius": "celsius",
    "_hz": "hertz",
    "_calls": "calls",
}

#: Suffixes that look like a unit but are not one of :data:`UNIT_SUFFIXES`, and the one to use.
MISNAMED_UNITS: dict[str, str] = {
    **dict.fromkeys(("_kb", "_mb", "_gb", "_kib", "_mib", "_gib", "_tib"), "_bytes"),
    **dict.fromkeys(("_pct", "_percentage", "_util"), "_percent"),
    **dict.fromkeys(("_mw", "_milliwatts", "_kw"), "_watts"),
    **dict.fromkeys(("_celcius", "_degrees", "_temp", "_millidegrees"), "_celsius"),
    **dict.fromkeys(("_khz", "_mhz", "_ghz", "_hertz"), "_hz"),
    **dict.fromkeys(("_per_s", "_per_sec"), "_per_second"),
}


@dataclass(frozen=True)
class StatKey:
    """One common key: its name, its unit (from its suffix) and what it measures."""

    name: str
    meaning: str

    @property
    def unit(self) -> str | None:
        """The unit its suffix names (None: a plain count or ratio)."""
        return unit_of(self.name)


#: The common keys, each given where the accelerator can read it (docs/concepts.md section 7).
VOCABULARY: dict[str, StatKey] = {
    key.name: key
    for key in (
        StatKey("memory_allocated_bytes", "held by this process's tensors (its allocator)"),
        StatKey(
            "memory_reserved_bytes",
            "held by this process's caching allocator: allocated, and cached for reuse",
        ),
        StatKey(
            "memory_peak_allocated_bytes",
            "the most memory_allocated_bytes since this process started (or reset its peak)",
        ),
        StatKey("memory_used_bytes", "in use on the device, by every process (device-wide)"),
        StatKey("memory_total_bytes", "the device's capacity"),
        StatKey(
            "utilization_percent",
            "how busy the device's compute was recently, 0 to 100 (the CPU: the machine's CPUs)",
        ),
        StatKey("power_watts", "the device's power draw"),
        StatKey("temperature_celsius", "the device's temperature"),
        StatKey(
            "cpu_percent",
            "the CPU accelerator's machine-wide CPU use since the previous reading (kept from "
            "the first contract; the same reading as its utilization_percent)",
        ),
        StatKey("swap_percent", "the CPU accelerator's machine-wide swap in use"),
        StatKey(
            "cpu_fallback_calls",
            "calls of operators the device lacks that ran on the CPU in this process "
            "(ACCELCTL_CPU_FALLBACK=1), since it started",
        ),
    )
}

#: Figures no reading can have below zero, by suffix; ``_percent`` is also at most 100.
_NON_NEGATIVE = ("_bytes", "_percent", "_watts", "_hz", "_per_second", "_calls")

#: Pairs of common keys where the first can never exceed the second in one reading.
ORDERED_KEYS: tuple[tuple[str, str], ...] = (
    ("memory_allocated_bytes", "memory_reserved_bytes"),
    ("memory_allocated_bytes", "memory_peak_allocated_bytes"),
    ("memory_reserved_bytes", "memory_total_bytes"),
    ("memory_allocated_bytes", "memory_total_bytes"),
    ("memory_used_bytes", "memory_total_bytes"),
)


def unit_of(key: str) -> str | None:
    """Return the unit that a key's suffix names, or None.

    ``"bytes"`` for ``"cuda.l2_cache_bytes"``; None for a key without one (a plain count or
    ratio)."""
    for suffix, unit in UNIT_SUFFIXES.items():
        if key.endswith(suffix):
            return unit
    return None


def is_unavailable(figure: float) -> bool:
    """True for a figure that is supported but could not be read at this reading (NaN)."""
    return isinstance(figure, float) and math.isnan(figure)


def problems(stats: Mapping[str, int | float], prefixes: Iterable[str]) -> list[str]:
    """What in one reading breaks the vocabulary's rules, one short sentence each (empty: none).

    :param stats: one ``device_stats`` reading (already a flat dict of numbers: the handle
        checks that).
    :param prefixes: the accelerator's own prefixes, each with its dot (``"cuda."``).
    """
    prefixes = tuple(prefixes)
    found: list[str] = []
    for key, figure in stats.items():
        if "." in key:
            if not key.startswith(prefixes):
                found.append(f"{key!r} is prefixed with another name than {prefixes[0]!r}")
                continue
        elif key not in VOCABULARY:
            shown = f" nor prefixed with {prefixes[0]!r}" if prefixes else ""
            found.append(f"{key!r} is neither a common key{shown}")
            continue
        found.extend(_unit_problems(key, figure))
    for smaller, larger in ORDERED_KEYS:
        low, high = stats.get(smaller), stats.get(larger)
        if low is None or high is None or is_unavailable(low) or is_unavailable(high):
            continue
        if low > high:
            found.append(f"{smaller} ({low}) exceeds {larger} ({high})")
    return found


def _unit_problems(key: str, figure: int | float) -> list[str]:
    name = key.rsplit(".", 1)[-1]
    for wrong, right in MISNAMED_UNITS.items():
        if name.endswith(wrong):
            return [f"{key!r}: {wrong} is not a unit of the vocabulary; convert to {right}"]
    if is_unavailable(figure):
        return []
    if isinstance(figure, float) and math.isinf(figure):
        return [f"{key!r} is {figure}: a figure is finite, or NaN when it cannot be read now"]
    if key.endswith(_NON_NEGATIVE) and figure < 0:
        return [f"{key!r} is {figure}: {unit_of(key)} cannot be negative"]
    if key.endswith("_percent") and figure > 100:
        return [f"{key!r} is {figure}: a percentage is 0 to 100"]
    return []


__all__ = [
    "MISNAMED_UNITS",
    "ORDERED_KEYS",
    "UNIT_SUFFIXES",
    "VOCABULARY",
    "StatKey",
    "is_unavailable",
    "problems",
    "unit_of",
]

"""Which Intel GPUs a process may use, read as Level Zero and SYCL read them.

``ZE_AFFINITY_MASK`` and ``ONEAPI_DEVICE_SELECTOR``, read the way Level Zero and the SYCL runtime
under ``torch.xpu`` read them.

``ZE_AFFINITY_MASK`` (Level Zero) is a *mask*, not an order: the devices it keeps stay in the
driver's order.

- unset, or blank: every device;
- a comma list of ``device`` or ``device.subdevice`` indices (``"0,2"``, ``"1.0"``): a device is
  kept when it is named alone or through one of its sub-devices;
- entries that are not indices, and indices beyond the devices present, are ignored.

``ONEAPI_DEVICE_SELECTOR`` (the SYCL runtime) then picks among what Level Zero shows. Its terms are
separated by ``;``, each ``[!]backend:device,device...``. torch's XPU device uses the Level Zero
backend, so only terms for ``level_zero`` or ``*`` matter, and their devices ``*``, ``gpu``,
``N``, ``N.M``, ``N.*``. A selector without a positive term for them (``"opencl:*"``) leaves no
device; ``!`` terms take devices away. Devices of another type (``cpu``, ``fpga``) and terms
that cannot be read are ignored here; in doubt the SYCL runtime has the last word once torch
starts it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# The names live in ``variables``: every probe needs them, this module only a machine with an
# Intel GPU and an XPU build of torch.
from .variables import AFFINITY_VAR, SELECTOR_VAR

_INDEX = re.compile(r"^(\d+)(?:\.(?:\d+|\*))*$")
_LEVEL_ZERO_BACKENDS = ("level_zero", "*")


def _device_index(entry: str) -> int | None:
    """``"2"``, ``"2.1"`` or ``"2.*"`` -> 2; anything else -> None."""
    match = _INDEX.match(entry.strip())
    return None if match is None else int(match.group(1))


def affinity_mask(value: str | None, count: int) -> list[int]:
    """The devices (indices below ``count``) that ``ZE_AFFINITY_MASK=value`` keeps, in order."""
    if value is None or not value.strip():
        return list(range(count))
    named = {_device_index(entry) for entry in value.split(",")}
    return [index for index in range(count) if index in named]


def _selected(devices: str, count: int) -> set[int]:
    chosen: set[int] = set()
    for item in devices.split(","):
        item = item.strip().lower()
        if item in ("*", "gpu", "*.*"):
            return set(range(count))
        index = _device_index(item)
        if index is not None and index < count:
            chosen.add(index)
    return chosen


def device_selector(value: str | None, count: int) -> list[int]:
    """Return the positions that ``ONEAPI_DEVICE_SELECTOR=value`` keeps, in order.

    The positions (among ``count`` Level Zero devices) that ``ONEAPI_DEVICE_SELECTOR=value``
    keeps, in order."""
    if value is None or not value.strip():
        return list(range(count))
    kept: set[int] | None = None  # None until a positive term is seen
    dropped: set[int] = set()
    for term in value.split(";"):
        backend, colon, devices = term.strip().partition(":")
        if not colon:
            continue  # not a term this reader understands
        negative = backend.startswith("!")
        backend = backend.lstrip("!").strip().lower()
        if negative:
            if backend in _LEVEL_ZERO_BACKENDS:
                dropped |= _selected(devices, count)
            continue
        kept = set() if kept is None else kept
        if backend in _LEVEL_ZERO_BACKENDS:
            kept |= _selected(devices, count)
    base = set(range(count)) if kept is None else kept
    return [index for index in range(count) if index in base and index not in dropped]


def visible_devices(count: int, environ: Mapping[str, str]) -> list[int]:
    """Indices (of ``count`` devices, in the driver's order) that ``torch.xpu`` will see."""
    masked = affinity_mask(environ.get(AFFINITY_VAR), count)
    return [masked[i] for i in device_selector(environ.get(SELECTOR_VAR), len(masked))]

"""Device-spec parsing shared by every plugin: one table of accepted forms, one set of messages.

The forms are in docs/concepts.md section 5. Each refusal is a :class:`~accelctl.DeviceSpecError`
naming the accelerator, the spec as given, what is visible and the accepted forms."""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._base.project import MAX_DEVICE_COUNT
from .._base.wording import setting
from .errors import DeviceSpecError


@dataclass(frozen=True)
class AcceptedForms:
    """What one parser accepts, written for the kind of spec that was given.

    ``values`` for a Python value, ``strings`` for a string, which is all that a command line's
    ``--devices`` or ``ACCELCTL_DEVICES`` can hold (no list there), so a refusal never lists a form
    the channel it came through cannot take."""

    values: str
    strings: str

    def for_spec(self, spec: object) -> str:
        """The forms to list to whoever gave ``spec``."""
        return self.strings if isinstance(spec, str) else self.values


INDEXED_FORMS = AcceptedForms(
    values='"auto" or -1 (all visible devices), k >= 1 or "k" (the first k), '
    '"i,j", "i," or [i, j] (exactly those indices)',
    strings='"auto" or "-1" (all visible devices), "k" such as "2" (the first k), '
    '"i,j" or "i," such as "0,1" or "1," (exactly those indices)',
)
PROCESS_COUNT_FORMS = AcceptedForms(
    values='"auto" (1 process), k >= 1 or "k" (k processes)',
    strings='"auto" (1 process), "k" such as "2" (k processes)',
)
SINGLE_DEVICE_FORMS = AcceptedForms(
    values='"auto", -1, 1, "1", [0] or "0," (the one device)',
    strings='"auto", "-1", "1" or "0," (the one device)',
)

_INT_RE = re.compile(r"^[+-]?\d+$")
#: "0-3", "0..3", "0:3": a range, which no parser reads (a message says how to list it instead).
_RANGE_RE = re.compile(r"^(\d{1,9})\s*(?:-|\.\.|:)\s*(\d{1,9})$")
#: "[0, 1]", "(0,1)": a Python list or tuple written as a string (a command line's habit).
_BRACKETED_RE = re.compile(r"^[\[(]\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*[\])]$")
_ALL = "all"
#: Digits that can still be a count or index (longer is refused before ``int()``'s own limit).
_MAX_DIGITS = len(str(MAX_DEVICE_COUNT))
_TOO_LARGE = (
    f"is too large: accelctl accepts at most {MAX_DEVICE_COUNT} devices (or processes) and "
    f"indices below {MAX_DEVICE_COUNT}"
)


def _visible_phrase(accelerator: str, visible: int) -> str:
    # In words ("0 to 3"), never "0-3": that would read as a spec, and ranges are not one.
    if visible == 0:
        return f"no {accelerator} device is visible"
    if visible == 1:
        return f"1 {accelerator} device is visible (index 0)"
    if visible == 2:
        return f"2 {accelerator} devices are visible (indices 0 and 1)"
    return f"{visible} {accelerator} devices are visible (indices 0 to {visible - 1})"


@dataclass(frozen=True)
class _Refusal:
    """Builds the errors of one parse: the accelerator, the spec and the context never change."""

    accelerator: str
    spec: object
    visible: int | None
    visible_phrase: str
    forms: AcceptedForms

    @property
    def takes_indices(self) -> bool:
        return self.forms is not PROCESS_COUNT_FORMS

    def __call__(self, problem: str) -> DeviceSpecError:
        accepted = self.forms.for_spec(self.spec)
        message = (
            f"{self.accelerator}: {setting('devices', self.spec, shown=_shown(self.spec))} "
            f"{problem}; {self.visible_phrase}. "
            f"Accepted: {accepted}."
        )
        return DeviceSpecError(
            message,
            accelerator=self.accelerator,
            spec=self.spec,
            visible=self.visible,
            accepted=accepted,
        )


def _shown(spec: object) -> str:
    """The spec for a message: its repr, shortened (a huge int's repr itself can fail)."""
    try:
        text = repr(spec)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"<an int of {spec.bit_length()} bits>" if isinstance(spec, int) else "<?>"
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"


def _is_bool(value: Any) -> bool:
    """Say whether ``value`` is a bool or a boolean numpy or torch scalar.

    ``torch.tensor(True)`` converts to an index, so its dtype is read."""
    if isinstance(value, bool):
        return True
    scalar = getattr(value, "ndim", None) == 0
    return scalar and str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _as_int(value: Any) -> int | None:
    """An int for ints and int-likes (numpy ints, 0-d integer tensors), else None (bools too)."""
    if _is_bool(value):
        return None
    try:
        return operator.index(value)
    except (TypeError, ValueError, RuntimeError):  # torch says "only integer tensors ..." so
        return None


def _parse_int(text: str, refuse: _Refusal) -> int:
    """``int(text)`` for a text that matched ``_INT_RE``, refusing one too long to be a count."""
    if len(text.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
        raise refuse(_TOO_LARGE)
    return int(text)


def _normalise(spec: Any, refuse: _Refusal) -> int | str | list[int]:
    """Turn any accepted spelling into ``"all"``, an ``int`` count or a ``list`` of indices."""
    if spec is None:
        raise refuse('is not a device spec (use "auto" for all visible devices)')
    if _is_bool(spec):
        raise refuse("is a bool, not a device spec")
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise refuse("is empty")
        if text.lower() == "auto":
            return _ALL
        if _BRACKETED_RE.match(text) or _RANGE_RE.match(text):
            raise refuse(_not_a_string_spec(text, refuse))
        if "," in text:
            if text.count(",") > MAX_DEVICE_COUNT:
                raise refuse(_TOO_LARGE)
            parts = [part.strip() for part in text.split(",")]
            if parts[-1] == "":
                parts.pop()  # "0," is the one-index list [0]
            if not parts or any(not part for part in parts):
                raise refuse("has an empty item in its comma-separated list")
            indices = []
            for part in parts:
                if not _INT_RE.match(part):
                    raise refuse(f"has {part!r} in its list, which is not a device index")
                indices.append(_index(_parse_int(part, refuse), refuse))
            return indices
        if _INT_RE.match(text):
            return _count_or_all(_parse_int(text, refuse), refuse)
        raise refuse(_not_a_string_spec(text, refuse))
    count = _as_int(spec)
    if count is not None:
        return _count_or_all(count, refuse)
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise refuse("is an empty list, which selects no device")
        if len(spec) > MAX_DEVICE_COUNT:
            raise refuse(_TOO_LARGE)
        indices = []
        for item in spec:
            index = _as_int(item)
            if index is None:
                raise refuse(
                    f"holds {_shown(item)} ({type(item).__name__}), which is not a device index"
                )
            indices.append(_index(index, refuse))
        return indices
    if isinstance(spec, float):
        raise refuse("is a float; use an int count or a list of indices")
    raise refuse(f"has type {type(spec).__name__}, which is not a device spec")


def _not_a_string_spec(text: str, refuse: _Refusal) -> str:
    """Describe the problem with a string that is no accepted form at all.

    The problem names the habits seen elsewhere (a range, a list in brackets) and, for an indexed
    accelerator, how to write them here."""
    problem = 'is not "auto", a number or a comma-separated list of indices'
    found = _RANGE_RE.match(text)
    if found:
        first, last = int(found.group(1)), int(found.group(2))
        problem = "is a range, which accelctl does not read"
        visible = refuse.visible if refuse.visible is not None else 0
        if refuse.takes_indices and first < last < min(visible, first + 16):
            listed = ",".join(str(index) for index in range(first, last + 1))
            problem += f'; list the indices instead: "{listed}"'
        return problem
    found = _BRACKETED_RE.match(text)
    if found:
        problem = "is a list written as a string"
        if refuse.takes_indices:
            items = [item.strip() for item in found.group(1).split(",")]
            listed = ",".join(items) + ("," if len(items) == 1 else "")
            problem += f'; write the indices without brackets: "{listed}"'
    return problem


def _index(index: int, refuse: _Refusal) -> int:
    if index >= MAX_DEVICE_COUNT:
        raise refuse(_TOO_LARGE)
    return index


def _count_or_all(count: int, refuse: _Refusal) -> int | str:
    if count > MAX_DEVICE_COUNT:
        raise refuse(_TOO_LARGE)
    if count == -1:
        return _ALL
    if count == 0:
        on_cpu = setting("accelerator", "cpu")
        hint = "" if refuse.accelerator == "cpu" else f"; to run on the CPU use {on_cpu}"
        raise refuse(f"asks for no device (0){hint}")
    if count < 0:
        raise refuse("is negative; the only negative spec is -1 (all visible devices)")
    return count


def parse_indexed_devices(devices: Any, *, visible: int, accelerator: str) -> list[int]:
    """Parse a devices spec for an accelerator whose devices are numbered ``0 .. visible-1``.

    ================================  ==========================
    spec                              result
    ================================  ==========================
    ``"auto"``, ``-1``, ``"-1"``      ``[0, ..., visible-1]``
    ``k`` (>= 1), ``"k"``             ``[0, ..., k-1]``
    ``"i,j"``, ``"i,"``, ``[i, j]``   exactly those indices
    ================================  ==========================

    White space around a string is ignored; everything else (``0``, ``[]``, ``None``, ``True``,
    ``1.5``, ``"[0]"``, ``-2``, duplicates, indices or counts past ``visible``) raises
    :class:`~accelctl.DeviceSpecError`. Returns the indices in rank order.

    :param visible: how many devices this process can see (honouring ``*_VISIBLE_DEVICES``).
    """
    refuse = _Refusal(
        accelerator, devices, visible, _visible_phrase(accelerator, visible), INDEXED_FORMS
    )
    return _select(_normalise(devices, refuse), visible, refuse)


def _select(value: int | str | list[int], visible: int, refuse: _Refusal) -> list[int]:
    if value == _ALL:
        if visible <= 0:
            raise refuse("asks for all devices, but none is visible")
        return list(range(visible))
    if isinstance(value, int):
        if value > visible:
            raise refuse(f"asks for {value} devices, more than are visible")
        return list(range(value))
    assert isinstance(value, list)
    seen: set[int] = set()
    for index in value:
        if index < 0:
            raise refuse(f"holds the negative index {index}")
        if index in seen:
            raise refuse(f"repeats index {index}")
        if index >= visible:
            raise refuse(f"holds index {index}, which is out of range")
        seen.add(index)
    return list(value)


def parse_process_count(devices: Any, *, accelerator: str = "cpu") -> int:
    """Parse a devices spec into a process count, for an accelerator that runs them on one device.

    Such as the CPU. ``"auto"`` is 1, ``k`` or ``"k"`` (k >= 1) is k; indices and ``-1`` are
    refused, saying it takes a process count."""
    cores = os.cpu_count() or 1
    refuse = _Refusal(
        accelerator,
        devices,
        None,
        f"{accelerator} takes a process count (this machine has {cores} cores)",
        PROCESS_COUNT_FORMS,
    )
    value = _normalise(devices, refuse)
    if isinstance(devices, str) and devices.strip().lower() == "auto":
        return 1
    if value == _ALL:
        raise refuse("means all devices of an indexed accelerator, which the CPU is not")
    if isinstance(value, list):
        raise refuse("lists device indices, but the CPU has no device indices")
    assert isinstance(value, int)
    return value


def parse_single_device(devices: Any, *, accelerator: str, visible: int = 1) -> list[int]:
    """Parse a devices spec for an accelerator that exposes a single device (MPS).

    ``visible`` is 1 or 0: ``"auto"``, ``-1``, ``1``, ``"1"``, ``[0]`` and ``"0,"`` give ``[0]``."""
    phrase = f"{accelerator} exposes a single device"
    if not visible:
        phrase += " and it is not available here"
    refuse = _Refusal(accelerator, devices, visible, phrase, SINGLE_DEVICE_FORMS)
    return _select(_normalise(devices, refuse), min(visible, 1), refuse)


def devices_spec(parsed: int | Sequence[int]) -> str:
    """Return a devices spec that parses back to ``parsed``.

    ``"2"`` for a count, ``"0,2"`` for indices, ``"1,"`` for a single index (``"1"`` would mean "the
    first one")."""
    if isinstance(parsed, int):
        return str(parsed)
    indices = [str(index) for index in parsed]
    return ",".join(indices) + ("," if len(indices) == 1 else "")


def typed_spec(parsed: int | Sequence[int]) -> str:
    """Return the spec a user would type for ``parsed``.

    ``"2"`` for the first two devices (``[0, 1]``), ``"1"`` for the first one, else
    :func:`devices_spec`'s exact form."""
    if not isinstance(parsed, int) and parsed and list(parsed) == list(range(len(parsed))):
        return str(len(parsed))
    return devices_spec(parsed)


def given_spec(spec: object, parsed: int | Sequence[int]) -> str:
    """Return a devices spec as the user gave it, for ``--devices`` in a suggested command.

    ``"0,1"`` stays ``0,1`` (never the count 2), ``2`` is ``2``; for ``"auto"`` or a list,
    :func:`typed_spec`'s form of ``parsed``, what it selected."""
    if isinstance(spec, str) and spec.strip() and spec.strip().lower() != "auto":
        return spec.strip()
    if isinstance(spec, int) and not isinstance(spec, bool):
        return str(spec)
    return typed_spec(parsed)

"""A device as a string, read and written without torch.

``"<type>:<index>"`` (or ``"<type>"``). ``accelctl stats`` hands ``device_stats`` the string form,
and plugins split either form with :func:`split_device`.
"""

from __future__ import annotations

import re
from typing import Any

_DEVICE_RE = re.compile(r"^([a-z][a-z0-9_]*)(?::(\d+))?$")
_FORMS = "a torch.device, or a str '<type>' or '<type>:<index>' such as 'cpu' or 'cuda:0'"


def split_device(device: Any) -> tuple[str, int | None]:
    """Return the type and index of ``device``.

    ``torch.device("cuda", 1)`` and ``"cuda:1"`` both give ``("cuda", 1)``, ``"cpu"`` gives
    ``("cpu", None)``; a ``TypeError`` for what is neither a ``torch.device`` nor a ``str``, a
    ``ValueError`` for a string of another form."""
    if isinstance(device, str):
        match = _DEVICE_RE.match(device.strip())
        if match is None:
            raise ValueError(f"device {device!r} is not a device name; expected {_FORMS}")
        index = match.group(2)
        return match.group(1), None if index is None else int(index)
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if isinstance(kind, str) and (index is None or isinstance(index, int)):
        return kind, index
    raise TypeError(f"device must be {_FORMS}; got {type(device).__name__} {device!r}")


def device_string(device_type: str, index: int | None = None) -> str:
    """``"cuda:0"`` (or ``"cpu"`` without an index): what ``str(torch.device(...))`` gives."""
    return device_type if index is None else f"{device_type}:{index}"

"""Names shared by the hook markers, discovery and the messages.

One constant rules them, as in pytest and tox (the ``ACCELCTL_*`` variables are
:mod:`accelctl._contract.settings`')."""

from __future__ import annotations

PROJECT_NAME = "accelctl"
ENTRY_POINT_GROUP = f"{PROJECT_NAME}.accelerators"

#: Selector words that can never be an accelerator's canonical name.
RESERVED_NAMES = frozenset({"auto", "gpu"})

#: The most devices (or processes) a spec may ask for, and the bound of an index: far above any
#: machine, low enough that ``10**10`` is refused at once instead of exhausting memory further on.
MAX_DEVICE_COUNT = 65536

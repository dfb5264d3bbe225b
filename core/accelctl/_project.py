"""Names shared by the hook markers, discovery and the messages.

One constant rules them, as in pluggy-based projects such as pytest and tox: the markers'
project name and the entry-point group derive from it (the ``ACCELCTL_*`` variables are
:mod:`accelctl._settings`').
"""

from __future__ import annotations

PROJECT_NAME = "accelctl"
ENTRY_POINT_GROUP = f"{PROJECT_NAME}.accelerators"

#: Selector words that can never be an accelerator's canonical name.
RESERVED_NAMES = frozenset({"auto", "gpu"})

"""Names shared by the hook markers, the plugin manager, discovery and the environment.

One constant rules them all, as in pluggy-based projects such as pytest and tox: the markers'
project name, the entry-point group and the environment-variable prefix derive from it.
"""

from __future__ import annotations

PROJECT_NAME = "accelctl"
ENTRY_POINT_GROUP = f"{PROJECT_NAME}.accelerators"

ENV_ACCELERATOR = "ACCELCTL_ACCELERATOR"
ENV_PLUGINS = "ACCELCTL_PLUGINS"
ENV_DISABLE = "ACCELCTL_DISABLE"
ENV_DEVICES = "ACCELCTL_DEVICES"
ENV_HOOK_TIMEOUT = "ACCELCTL_HOOK_TIMEOUT"

#: Selector words that can never be an accelerator's canonical name.
RESERVED_NAMES = frozenset({"auto", "gpu"})

#: accelctl's own settings: read before any plugin code runs, restored if a plugin's import
#: changes them.
ENV_VARIABLES = (ENV_ACCELERATOR, ENV_PLUGINS, ENV_DISABLE, ENV_DEVICES)

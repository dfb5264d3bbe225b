"""accelctl's own settings, read from the environment in one place, before plugin code runs.

The variables are read once per use: a :class:`~accelctl.Registry` reads its allowlist and
blocklist at its first scan (before it imports any plugin), and :func:`accelctl.resolve` reads
``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES`` when it starts, before it runs any plugin code.
So a plugin that changes the variables while it is imported or called cannot steer the choice
being made (and one whose import changes them is named in a warning, the change undone: see
:class:`accelctl._isolation.watch_import`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._discovery import PluginFilter
from ._project import ENV_ACCELERATOR, ENV_DEVICES


@dataclass(frozen=True)
class Settings:
    """What the ``ACCELCTL_*`` variables said when they were read."""

    #: ``ACCELCTL_ACCELERATOR``, stripped; "" when unset.
    accelerator: str = ""
    #: ``ACCELCTL_DEVICES``, stripped; "" when unset.
    devices: str = ""
    #: ``ACCELCTL_PLUGINS`` and ``ACCELCTL_DISABLE``.
    plugin_filter: PluginFilter = field(default_factory=PluginFilter)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the variables from ``environ`` (default: ``os.environ``, now)."""
        environ = os.environ if environ is None else environ
        return cls(
            accelerator=environ.get(ENV_ACCELERATOR, "").strip(),
            devices=environ.get(ENV_DEVICES, "").strip(),
            plugin_filter=PluginFilter.from_environ(environ),
        )

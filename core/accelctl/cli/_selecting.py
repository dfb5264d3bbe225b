"""The CLI's selection of an accelerator, under the fan-out's deadline.

For ``resolve`` and ``launch``; the deadline is ``ACCELCTL_HOOK_TIMEOUT``. A plugin that stops
answering is an error naming it, never a hang.

In two steps, each asking the plugin it is for: the accelerator is chosen first (a canonical name
is that plugin's from the start; ``"auto"``, ``"gpu"`` and an alias ask every plugin at once,
each under its own deadline), then its devices are resolved under a deadline that names the
chosen plugin. The variables are read once, before any plugin code runs, as
:func:`accelctl.resolve` reads them.
"""

from __future__ import annotations

import os

from .._choice.selection import Selection, asked_name, resolve_chosen, select_accelerator
from .._contract.settings import SelectionVariables
from .._host.fanout import run_one
from .._host.isolation import import_torch
from .._host.registry import get_registry


def resolve_in_time(accelerator: str, devices: str) -> Selection:
    """:func:`accelctl.resolve` for a command, each step under the deadline."""
    environ = dict(os.environ)
    chosen = SelectionVariables.read(environ)
    named = get_registry().named(asked_name(accelerator, chosen.accelerator))
    handle = run_one(lambda: select_accelerator(accelerator, environ=environ), named)
    import_torch()  # torch's own import is not the plugin's time
    return run_one(
        lambda: resolve_chosen(handle, accelerator, devices, environ=environ, chosen=chosen),
        handle,
    )

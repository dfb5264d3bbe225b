"""The pluggy markers of project ``accelctl``: ``@accelctl.hookimpl`` marks a plugin's hooks."""

from __future__ import annotations

import pluggy

from .._base.project import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a function of :mod:`accelctl.hookspecs` as a hook specification."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin function as the implementation of the hook of the same name.

.. code-block:: python

    import accelctl

    @accelctl.hookimpl
    def detect() -> bool:
        return True
"""

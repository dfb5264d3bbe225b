"""The plugin host: discovery, loading, the handle, the registry, asking many plugins at once.

Discovery reads entry points. Imports ``_base``, ``_contract`` and ``accelctl.hookspecs``."""

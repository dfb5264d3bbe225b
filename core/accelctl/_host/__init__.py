"""The plugin host: discovery, loading, the handle, the registry, asking many plugins at once.

Discovery through entry points, loading, the handle, the registry, asking many plugins at once.
Imports ``_base``, ``_contract`` and ``accelctl.hookspecs``."""

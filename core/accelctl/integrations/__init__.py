"""Bridges from accelctl plugins to training frameworks.

Each module here imports its framework on import, so nothing in :mod:`accelctl` imports one
unless that module is used:

- :mod:`accelctl.integrations.lightning`: Lightning's ``Trainer`` and ``Fabric`` on any accelctl
  accelerator (extra ``accelctl[lightning]``);
- :mod:`accelctl.integrations.accelerate`: HF Accelerate's ``Accelerator`` on any accelctl
  accelerator (extra ``accelctl[accelerate]``).
"""

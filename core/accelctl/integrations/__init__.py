"""Bridges from accelctl plugins to training frameworks, under the contract's names.

Their code is the ``accelctl-integrations`` distribution (``integrations/`` in the repository),
which the extras install; each module here is that distribution's module of the same name:

- :mod:`accelctl.integrations.lightning`: Lightning's ``Trainer`` and ``Fabric`` on any accelctl
  accelerator (extra ``accelctl[lightning]``);
- :mod:`accelctl.integrations.accelerate`: HF Accelerate's ``Accelerator`` on any accelctl
  accelerator (extra ``accelctl[accelerate]``).

Nothing in :mod:`accelctl` imports them, or their frameworks, unless they are used.
"""

"""Bridges from accelctl plugins to training frameworks: the ``accelctl-integrations``
distribution, which the core's extras install and the contract's names re-export.

- :mod:`accelctl.integrations.lightning` (this package's ``lightning``): Lightning's ``Trainer``
  and ``Fabric`` on any accelctl accelerator (extra ``accelctl[lightning]``);
- :mod:`accelctl.integrations.accelerate` (``accelerate``): HF Accelerate's ``Accelerator`` on any
  accelctl accelerator (extra ``accelctl[accelerate]``).

Each module imports its framework on import. They adapt the frameworks' internals for the
versions they are tested with (:mod:`._versions`), so they are released with those frameworks'
releases, apart from the core; they are first-party and pinned to the core's version, so they
may use its private modules (its registry, the rule ``"auto"`` applies to devices, its settings).
"""

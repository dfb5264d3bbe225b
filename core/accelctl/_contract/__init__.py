"""What a plugin and a user see: errors, hook records, device specs, settings, the base class.

The errors, the records hooks return, device specs, the ``ACCELCTL_*`` settings, the ``Accelerator``
base class. Imports ``_base`` only."""

"""What a plugin and a user see: the errors, the records hooks return, device specs, the
``ACCELCTL_*`` settings, the ``Accelerator`` base class. Imports ``_base`` only."""

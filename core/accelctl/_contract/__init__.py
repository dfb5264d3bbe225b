"""What a plugin and a user see: errors, hook records, device specs, settings, the base class.

Hook records are what hooks return; the settings are ``ACCELCTL_*``; the base class is
``Accelerator``. Imports ``_base`` only."""

"""HF Accelerate's ``Accelerator`` on any accelctl accelerator: this name is the
``accelctl-integrations`` distribution's ``accelctl_integrations.accelerate`` (extra
``accelctl[accelerate]``); docs/accelerate.md says what it does."""

from accelctl._companions import companion

companion(__name__, "accelctl_integrations.accelerate", "accelctl-integrations", "accelerate")

from accelctl_integrations.accelerate import *  # noqa: E402, F403 - the names, for type checkers

"""Lightning's ``Trainer`` (and ``Fabric``) on any accelctl accelerator: this name is the
``accelctl-integrations`` distribution's ``accelctl_integrations.lightning`` (extra
``accelctl[lightning]``); docs/lightning.md says what it does."""

from accelctl._companions import companion

companion(__name__, "accelctl_integrations.lightning", "accelctl-integrations", "lightning")

from accelctl_integrations.lightning import *  # noqa: E402, F403 - the names, for type checkers

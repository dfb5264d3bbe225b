"""transformers' ``Trainer`` on any accelctl accelerator: this name is the
``accelctl-integrations`` distribution's ``accelctl_integrations.transformers`` (extra
``accelctl[transformers]``); docs/transformers.md says what it does."""

from accelctl._companions import companion

companion(__name__, "accelctl_integrations.transformers", "accelctl-integrations", "transformers")

from accelctl_integrations.transformers import *  # noqa: E402, F403 - the names, for type checkers

"""Bridges from accelctl plugins to training frameworks, under the contract's names.

Their code is the ``accelctl-integrations`` distribution (``integrations/`` in the repository),
which the extras install; each module here is that distribution's module of the same name:

- :mod:`accelctl.integrations.lightning`: Lightning's ``Trainer`` and ``Fabric`` on any accelctl
  accelerator (extra ``accelctl[lightning]``);
- :mod:`accelctl.integrations.accelerate`: HF Accelerate's ``Accelerator`` on any accelctl
  accelerator (extra ``accelctl[accelerate]``).

Nothing in :mod:`accelctl` imports them, or their frameworks, unless they are used.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def _bridge(name: str, extra: str) -> ModuleType:
    """``accelctl_integrations.<name>``, also made ``accelctl.integrations.<name>`` (one module
    under both names: its classes and what a test patches are the same either way).

    :raises ModuleNotFoundError: the bridges are not installed (the message says how), or their
        framework is not.
    """
    try:
        module = importlib.import_module(f"accelctl_integrations.{name}")
    except ModuleNotFoundError as exc:
        if exc.name not in ("accelctl_integrations", f"accelctl_integrations.{name}"):
            raise  # the framework itself: the bridge's own message says what to install
        raise ModuleNotFoundError(
            f"accelctl.integrations.{name} is in the accelctl-integrations distribution, which "
            f"is not installed: pip install 'accelctl[{extra}]'",
            name="accelctl_integrations",
        ) from exc
    sys.modules[f"{__name__}.{name}"] = module
    return module

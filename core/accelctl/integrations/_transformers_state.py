"""The adaptations of transformers' internals that the accelctl transformers bridge makes
(``docs/transformers.md``), version-gated as :mod:`._accelerate_state` gates Accelerate's.

transformers chooses the device in private code, from a fixed list of device kinds:

1. ``TrainingArguments._setup_devices`` (a cached property) drops any Accelerate state the
   process has, makes a ``PartialState`` of its own and, when that state is not distributed,
   picks the device again from its list (for another kind: ``cuda:0`` if there is one, else
   ``ACCELERATE_TORCH_DEVICE`` or the CPU). The bridge's ``TrainingArguments`` replaces it: the
   state is made through the Accelerate bridge, on the plugin's device and backend;
2. ``TrainingArguments.__post_init__`` refuses ``bf16`` unless one of the kinds on its list
   says it has bf16 (``is_torch_bf16_gpu_available``): the bridge asks torch whether the
   plugin's device type autocasts instead, and passes ``bf16`` on to Accelerate;
3. ``Trainer._move_model_to_device`` moves the model with ``model.to(device)``: where the
   device's tensors cannot take a CPU tensor's place in a ``Parameter`` (openreg's, XLA's),
   torch makes new ``Parameter`` objects, one per module that holds a tied weight, so the tied
   weights of a model (GPT-2's embedding and output layer) come apart and train as two,
   silently (transformers re-ties them for XLA only). Wrapped here: for the bridge's
   ``TrainingArguments`` the model moves keeping its parameters; for any other arguments it is
   transformers' own.

The first two act only on the bridge's ``TrainingArguments``; the third only on a ``Trainer``
made with them. They apply to the transformers versions tested (:data:`TESTED`); on any other
version nothing is adapted, importing the bridge warns, and ``TrainingArguments`` whose state
transformers made elsewhere than the plugin says are refused when they are made.
"""

from __future__ import annotations

import warnings
from typing import Any

from ._parameters import keeping_parameters
from ._versions import TestedRange

#: transformers versions the adaptation is tested with: ``lower <= version < upper``.
TESTED = TestedRange((5, 24), (5, 25))

#: Attribute set on the wrapped method, so that installing twice wraps once.
_MARK = "__accelctl_adapted__"

#: What :func:`install` found: None before it ran, then whether the adaptation is active.
_installed: bool | None = None

#: True when a version string is in :data:`TESTED` (pre-releases of a tested minor included).
is_tested = TESTED.covers
#: :data:`TESTED` for messages: ``">=5.24,<5.25"``.
tested_range = TESTED.text


def transformers_version() -> str:
    """The installed transformers' version string."""
    import transformers

    return str(transformers.__version__)


def is_active() -> bool:
    """True when the adaptation is installed in this process."""
    return bool(_installed)


def install() -> bool:
    """Wrap ``Trainer._move_model_to_device``. Idempotent. Returns whether the adaptation is
    active; on an untested transformers it is not, and a ``UserWarning`` says so."""
    global _installed
    if _installed is not None:
        return _installed
    version = transformers_version()
    if not is_tested(version):
        _installed = False
        warnings.warn(
            f"accelctl.integrations.transformers is tested with transformers{tested_range()}, "
            f"not {version}: transformers' own device choice applies, and TrainingArguments on "
            "an accelctl plugin whose device transformers does not know are refused when they "
            "are made. Install a tested transformers",
            UserWarning,
            stacklevel=3,
        )
        return False
    from transformers import Trainer

    move = Trainer._move_model_to_device
    if not getattr(move, _MARK, False):

        def _move_model_to_device(self: Any, model: Any, device: Any) -> None:
            if getattr(self.args, "accelctl_accelerator", None) is None:
                move(self, model, device)
                return
            with keeping_parameters(device):
                move(self, model, device)

        setattr(_move_model_to_device, _MARK, True)
        _move_model_to_device.__doc__ = (
            "accelctl's adaptation of transformers' Trainer._move_model_to_device for accelctl "
            "accelerators (accelctl.integrations._transformers_state)."
        )
        Trainer._move_model_to_device = _move_model_to_device
    _installed = True
    return True

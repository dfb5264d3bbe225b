"""The adaptations of transformers' internals that the accelctl transformers bridge makes.

See ``docs/transformers.md``; version-gated as
:mod:`accelctl.integrations._accelerate.state` gates Accelerate's.

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
   transformers' own;
4. ``Trainer.train`` lets an error out as it came: where it is a kernel the device lacks, the
   bridge raises :class:`accelctl.MissingKernelError` from it instead, naming the layer of the
   ``Trainer``'s model and, for the autograd engine's undefined gradient, the operator in the
   loss's graph (docs/design/transformers-missing-kernels.md says why there).

The first two are the bridge's subclass of ``TrainingArguments`` (its own methods, no patch); the
last two are wrapped through :data:`PATCHES` (``_shared/patching.py``, which records them and can
undo them) the first time the bridge's ``TrainingArguments`` are made, not when the bridge is
imported, and act only on a ``Trainer`` made with them. :data:`ADAPTATION` declares the four
internals with the parameters the bridge passes, and importing the bridge refuses a release where
one changed (``accelctl.integrations._shared.versions``).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from accelctl._kernels.translate import raise_missing_kernel

from .._shared.parameters import keeping_parameters
from .._shared.patching import Patches
from .._shared.uses import USES
from .._shared.versions import TRANSFORMERS, Adaptation, Internal

#: What the bridge replaces (``_setup_devices``, a cached property whose function it falls back
#: to, and ``__post_init__``, which its subclass extends) and wraps (``_move_model_to_device``,
#: ``train``), with the parameters it passes, and the releases tested.
_TRAINER = "transformers:Trainer"
ADAPTATION = Adaptation(
    "transformers",
    TRANSFORMERS,
    (
        Internal("transformers:TrainingArguments", "_setup_devices", ("self",)),
        Internal("transformers:TrainingArguments", "__post_init__", ("self",)),
        Internal("transformers:Trainer", "_move_model_to_device", ("self", "model", "device")),
        Internal("transformers:Trainer", "train", ("self",)),
    ),
    USES["transformers"],
)

#: transformers' Trainer, as the wrappers read it (untyped to mypy); declared so that the names
#: the bridge uses of it are checked with the rest (tests/bridgeuses.py).
_Trainer = Annotated[Any, "transformers:Trainer"]

#: What :func:`install` replaced (docs/design/bridge-patching.md).
PATCHES = Patches(ADAPTATION)


def transformers_version() -> str:
    """The installed transformers' version string."""
    import transformers

    return str(transformers.__version__)


def is_active() -> bool:
    """True when the adaptation is installed in this process."""
    return len(PATCHES.applied()) == 2


def install() -> bool:
    """Wrap ``Trainer._move_model_to_device`` and ``Trainer.train`` (through :data:`PATCHES`).

    Idempotent. Returns True: a release where one changed is refused before, when the bridge is
    imported (:data:`ADAPTATION`); a release outside the tested window whose internals are all there
    is adapted, with a warning."""
    if is_active():
        return True
    ADAPTATION.require()  # done when the bridge was imported: refused there otherwise

    def wrap_move(move: Any) -> Any:
        def _move_model_to_device(self: _Trainer, model: Any, device: Any) -> None:
            if getattr(self.args, "accelctl_accelerator", None) is None:
                move(self, model, device)
                return
            with keeping_parameters(device):
                move(self, model, device)

        return _move_model_to_device

    def wrap_train(train: Any) -> Any:
        @functools.wraps(train)
        def _train(self: _Trainer, *args: Any, **kwargs: Any) -> Any:
            try:
                return train(self, *args, **kwargs)
            except Exception as exc:  # asked only once an error stopped the training
                handle = getattr(self.args, "accelctl_accelerator", None)
                if handle is not None:
                    device = self.accelerator.device
                    raise_missing_kernel(
                        exc, accelerator=handle.plugin_name, device=device, model=self.model
                    )
                raise

        return _train

    PATCHES.apply(
        _TRAINER,
        "_move_model_to_device",
        wrap_move,
        "the model moves keeping its Parameter objects, for the bridge's TrainingArguments",
    )
    PATCHES.apply(
        _TRAINER,
        "train",
        wrap_train,
        "a kernel the device lacks is raised as accelctl.MissingKernelError, for the bridge's "
        "TrainingArguments",
    )
    return True

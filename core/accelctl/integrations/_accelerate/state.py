"""The one adaptation of HF Accelerate's internals that the accelctl bridge makes.

See ``docs/accelerate.md``.

Accelerate's ``PartialState`` (the process-wide state every ``Accelerator`` shares) chooses the
device and the distributed set-up from a fixed list of device kinds (CUDA, XPU, NPU, MLU, HPU,
...), in two private methods:

1. ``_prepare_backend``: the ``torch.distributed`` backend and the ``DistributedType``. For a
   device it does not list it returns no backend and ``DistributedType.NO``: under a launcher,
   every process then trains alone, silently;
2. ``set_device``: this process's device, ``torch.<kind>.set_device``; for an unknown kind the
   CPU (or whatever ``ACCELERATE_TORCH_DEVICE`` says, the same device in every process).

Accelerate also enables FSDP (``fsdp_plugin``) only for the distributed types of its device list
(``MULTI_GPU``, ``MULTI_NPU``, ...): with its own CPU set-up (``MULTI_CPU``) the plugin is dropped
and the model trains in DDP, silently. The bridge therefore makes the state of an FSDP2 run on
CPU devices through these two methods too (``DistributedType.MULTI_GPU`` on the plugin's
backend, which Accelerate then turns into ``DistributedType.FSDP``).

While :func:`building` is active (``accelctl.integrations.accelerate.Accelerator`` makes the
state), the two wrapped methods follow the accelctl plugin instead: its ``distributed_backend``
(or the backend the user named, once the bridge checked that it carries the device's tensors)
and ``DistributedType.MULTI_GPU`` (Accelerate's kind for "DDP over torch.distributed on one
accelerator device per process", whose code paths use ``state.device`` rather than
``torch.cuda``) under a launcher, and the plugin's device for this process, made current by the
plugin's ``setup_device`` hook. At any other time they are Accelerate's own. They are wrapped
the first time the bridge makes a state (:func:`building` calls :func:`install`), not when the
bridge is imported, through :data:`PATCHES` (``_shared/patching.py``), which records both and can
undo them. The methods are private: :data:`ADAPTATION` declares them with the parameters the
wrappers pass, and importing the bridge refuses a release where one changed
(``accelctl.integrations._shared.versions``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelctl._choice.selection import known_name

from .._shared.patching import Patches
from .._shared.uses import USES
from .._shared.versions import ACCELERATE, Adaptation, Internal

if TYPE_CHECKING:
    import torch

    import accelctl

#: The two methods wrapped, with the parameters the wrappers pass on, and the releases tested.
_STATE = "accelerate.state:PartialState"
ADAPTATION = Adaptation(
    "accelerate",
    ACCELERATE,
    (
        Internal(
            _STATE,
            "_prepare_backend",
            ("self", "cpu", "sagemaker_dp", "backend"),
        ),
        Internal(_STATE, "set_device", ("self",)),
    ),
    USES["accelerate"],
)

#: Device types whose random state Accelerate's ``save_state`` saves itself
#: (``accelerate/checkpointing.py``); the bridge saves the others' (``DeviceRandomState``).
RANDOM_STATE_SAVED = frozenset(
    {"cpu", "cuda", "xpu", "mlu", "sdaa", "musa", "hpu", "neuron", "xla"}
)

#: What :func:`install` replaced (docs/design/bridge-patching.md).
PATCHES = Patches(ADAPTATION)


@dataclass(frozen=True)
class Pending:
    """What the state being made must hold: this process's device and the plugin's backend."""

    handle: accelctl.AcceleratorHandle
    device: torch.device
    #: True under a launcher with several processes: torch.distributed, DDP.
    distributed: bool
    #: The backend the user named for the group (checked usable); None: the plugin's.
    backend: str | None = None


#: Set by :func:`building` while the bridge makes Accelerate's state; None otherwise.
_pending: Pending | None = None


def accelerate_version() -> str:
    """The installed Accelerate's version string."""
    import accelerate

    return str(accelerate.__version__)


def is_active() -> bool:
    """True when the adaptation is installed in this process."""
    return len(PATCHES.applied()) == 2


@contextlib.contextmanager
def building(pending: Pending) -> Iterator[None]:
    """Make Accelerate's state, inside this block, on ``pending``'s device and backend."""
    global _pending
    install()
    _pending = pending
    try:
        yield
    finally:
        _pending = None


def install() -> bool:
    """Wrap ``PartialState._prepare_backend`` and ``set_device`` (through :data:`PATCHES`).

    Idempotent. Returns True: a release where one of the two changed is refused before, when the
    bridge is imported (:data:`ADAPTATION`, :class:`accelctl.FrameworkVersionError`); a release
    outside the tested window that has both is adapted, with a warning."""
    if is_active():
        return True
    ADAPTATION.require()  # done when the bridge was imported: refused there otherwise
    from accelerate.utils import DistributedType

    def wrap_prepare_backend(prepare_backend: Any) -> Any:
        def _prepare_backend(
            self: Any, cpu: bool = False, sagemaker_dp: bool = False, backend: str | None = None
        ) -> Any:
            pending = _pending
            if pending is None:
                return prepare_backend(self, cpu, sagemaker_dp, backend)
            if not pending.distributed:
                return None, DistributedType.NO
            # A backend the user names (InitProcessGroupKwargs(backend=...), ddp_backend) is
            # used; the bridge refused one the device lacks before Accelerate came here.
            # Accelerate does not pass a handler's "nccl" on (its default): Pending carries it.
            chosen = backend or pending.backend or pending.handle.info.distributed_backend
            return chosen, DistributedType.MULTI_GPU

        return _prepare_backend

    def wrap_set_device(set_device: Any) -> Any:
        def _set_device(self: Any) -> None:
            pending = _pending
            if pending is None:
                set_device(self)
                return
            named = os.environ.get("ACCELERATE_TORCH_DEVICE")
            if named and named != str(pending.device):
                warnings.warn(
                    f"ACCELERATE_TORCH_DEVICE={named} is ignored: accelctl accelerator "
                    f"{known_name(pending.handle)!r} runs this process on {pending.device}",
                    UserWarning,
                    stacklevel=2,
                )
            self.device = pending.device
            pending.handle.setup_device(pending.device)

        return _set_device

    PATCHES.apply(
        _STATE,
        "_prepare_backend",
        wrap_prepare_backend,
        "the plugin's backend and DistributedType.MULTI_GPU while the bridge makes the state",
    )
    PATCHES.apply(
        _STATE,
        "set_device",
        wrap_set_device,
        "the plugin's device, made current by its setup_device, while the bridge makes the state",
    )
    return True


class DeviceRandomState:
    """The random state of this process's device, for ``save_state`` / ``load_state``.

    Accelerate saves the random states of the device types it knows only
    (:data:`RANDOM_STATE_SAVED`); registered with ``register_for_checkpointing``, this object
    saves the plugin device's too, so that a resumed run draws the same dropout masks. Accelerate
    writes a registered object's state from the main process only: with several processes the
    state holds every process's, gathered, and each process restores its own.
    """

    def __init__(self, accelerator: Any, device: torch.device) -> None:
        self._accelerator = accelerator
        self.device = device

    def _module(self) -> Any:
        import torch

        return torch.get_device_module(self.device.type)

    def state_dict(self) -> dict[str, Any]:
        """``{"device_type": ..., "states": [one per process, in rank order]}``."""
        state = self._module().get_rng_state(self.device)
        states = [state]
        if self._accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            states = gather_object(states)
        return {"device_type": self.device.type, "states": states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore this process's device random state from what :meth:`state_dict` saved."""
        index = self._accelerator.process_index
        self._module().set_rng_state(state["states"][index], self.device)

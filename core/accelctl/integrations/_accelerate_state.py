"""The one adaptation of HF Accelerate's internals that the accelctl bridge makes
(``docs/accelerate.md``).

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
plugin's ``setup_device`` hook. At any other time they are Accelerate's own. The methods are
private: :data:`ADAPTATION` checks, once, that both are there with the parameters the wrappers
pass (``accelctl.integrations._versions``). Where one changed, nothing is wrapped, importing the
bridge warns naming it, and the bridge refuses a state that does not match the plugin when the
``Accelerator`` is made, naming it again.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelctl._selection import known_name

from ._uses import USES
from ._versions import ACCELERATE, Adaptation, Internal

if TYPE_CHECKING:
    import torch

    import accelctl

#: The two methods wrapped, with the parameters the wrappers pass on, and the releases tested.
ADAPTATION = Adaptation(
    "accelerate",
    ACCELERATE,
    (
        Internal(
            "accelerate.state:PartialState",
            "_prepare_backend",
            ("self", "cpu", "sagemaker_dp", "backend"),
        ),
        Internal("accelerate.state:PartialState", "set_device", ("self",)),
    ),
    USES["accelerate"],
)

#: Device types whose random state Accelerate's ``save_state`` saves itself
#: (``accelerate/checkpointing.py``); the bridge saves the others' (``DeviceRandomState``).
RANDOM_STATE_SAVED = frozenset(
    {"cpu", "cuda", "xpu", "mlu", "sdaa", "musa", "hpu", "neuron", "xla"}
)

#: Attribute set on each wrapped method, so that installing twice wraps once.
_MARK = "__accelctl_adapted__"

#: What :func:`install` found: None before it ran, then whether the adaptation is active.
_installed: bool | None = None


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
    return bool(_installed)


@contextlib.contextmanager
def building(pending: Pending) -> Iterator[None]:
    """Make Accelerate's state, inside this block, on ``pending``'s device and backend."""
    global _pending
    _pending = pending
    try:
        yield
    finally:
        _pending = None


def install() -> bool:
    """Wrap ``PartialState._prepare_backend`` and ``set_device``. Idempotent. Returns whether the
    adaptation is active: always, once :data:`ADAPTATION` let the bridge be imported (a release
    where one of the two changed is refused there, with :class:`accelctl.FrameworkVersionError`);
    a release outside the tested window that has both is adapted, with a warning."""
    global _installed
    if _installed is not None:
        return _installed
    ADAPTATION.require()  # done when the bridge was imported: refused there otherwise
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    prepare_backend = PartialState._prepare_backend
    set_device = PartialState.set_device
    if getattr(prepare_backend, _MARK, False):
        _installed = True
        return True

    def _prepare_backend(
        self: Any, cpu: bool = False, sagemaker_dp: bool = False, backend: str | None = None
    ) -> Any:
        pending = _pending
        if pending is None:
            return prepare_backend(self, cpu, sagemaker_dp, backend)
        if not pending.distributed:
            return None, DistributedType.NO
        # A backend the user names (InitProcessGroupKwargs(backend=...), ddp_backend) is used;
        # the bridge refused one the device lacks before Accelerate came here. Accelerate does
        # not pass a handler's "nccl" on (its default): the bridge's Pending carries it.
        chosen = backend or pending.backend or pending.handle.info.distributed_backend
        return chosen, DistributedType.MULTI_GPU

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

    for name, function in (("_prepare_backend", _prepare_backend), ("set_device", _set_device)):
        setattr(function, _MARK, True)
        function.__doc__ = (
            f"accelctl's adaptation of Accelerate's PartialState.{name} for accelctl "
            "accelerators (accelctl.integrations._accelerate_state)."
        )
        setattr(PartialState, name, function)
    _installed = True
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

"""transformers' ``Trainer`` on any accelctl accelerator.

::

    from accelctl.integrations.transformers import TrainingArguments  # the one changed line
    from transformers import Trainer

    args = TrainingArguments("out", accelerator="npu", bf16=True)
    Trainer(model, args, train_dataset=data).train()

transformers keeps a fixed list of device kinds: on a device it does not know, ``TrainingArguments``
chooses the CPU, and under a launcher every process trains alone (``DistributedType.NO``),
silently. These ``TrainingArguments`` are transformers' own, with two more fields,
``accelerator`` and ``devices``: Accelerate's state is made through the accelctl Accelerate
bridge (the plugin's device for this process, its ``distributed_backend`` and DDP across the
processes), so ``args.device`` is the plugin's device and ``transformers.Trainer`` trains there
unchanged; with ``fsdp`` (FSDP2, ``fsdp_config={"version": 2}``, transformers' default), the model
is sharded on a device mesh of the plugin's device type; with ``deepspeed`` (a config), DeepSpeed's
accelerator is the plugin's (``._deepspeed.device``) and DeepSpeed's engine
trains on the plugin's device. A set-up that cannot run is refused when
the arguments (or the ``Trainer``) are made.
The adaptation of transformers' internals is version-checked
(:mod:`._transformers.state`) and applied by :func:`enable`, which the
``TrainingArguments`` call; ``docs/transformers.md`` says what it changes.

The plugin's device figures join transformers' logs (and so every ``report_to`` integration's)
through a ``TrainerCallback``, with any ``TrainingArguments``::

    trainer = Trainer(model, args, train_dataset=data)
    add_device_stats(trainer)  # a DeviceStatsCallback, first: "device/memory_used_bytes", ...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from ._transformers import state as _transformers_state

try:
    # Before anything of transformers: a release the bridge cannot run on is refused here.
    _transformers_state.ADAPTATION.require()
    import transformers
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without transformers
    from ._shared.missing import framework_missing

    raise framework_missing("transformers", "transformers", exc) from exc

import accelctl
from accelctl._choice.selection import known_name
from accelctl._kernels.setup import set_up_kernels

from ._accelerate import state as _accelerate_state
from ._shared.parameters import replaces_parameters
from ._shared.patching import Patch
from ._transformers.callback import DeviceStatsCallback, add_device_stats
from .accelerate import _placement, _refuse_unusable_backend, check_sharding

if TYPE_CHECKING:
    import torch

__all__ = [
    "ADAPTATION",
    "ADAPTED",
    "DeviceStatsCallback",
    "TrainingArguments",
    "add_device_stats",
    "enable",
]

#: Accelerate's state, as the bridge reads it (untyped: Accelerate ships no types); declared so
#: that the names the bridge uses of it are checked with the rest (tests/bridgeuses.py).
_PartialState = Annotated[Any, "accelerate.state:PartialState"]


@dataclass
class TrainingArguments(transformers.TrainingArguments):  # type: ignore[misc]  # Any to mypy
    """``transformers.TrainingArguments`` on an accelctl accelerator.

    :param accelerator: what :func:`accelctl.resolve` takes: ``"auto"`` (``ACCELCTL_ACCELERATOR``
        when set, as ``accelctl launch`` sets it, else the available accelerator of highest
        priority), ``"gpu"``, a name or alias; in Python code also an
        :class:`accelctl.Accelerator` instance.
    :param devices: a devices spec of that accelerator, as
        :class:`.accelerate.Accelerator` takes it: ``"auto"`` is one device
        per process the launcher started on this machine (the first device in a process started
        alone), ``ACCELCTL_DEVICES`` when set; process ``LOCAL_RANK`` takes
        ``devices[LOCAL_RANK]``.

    Every other field is transformers' own. ``use_cpu`` is accelctl's choice (True for an
    accelerator whose devices are CPUs, but with ``deepspeed``, which Accelerate's CPU set-up
    drops). ``deepspeed`` needs DeepSpeed (``accelctl[deepspeed]``). :attr:`accelctl_accelerator`
    is the accelerator's :class:`~accelctl.AcceleratorHandle`.

    A ``Trainer`` made with them stops on a kernel the device lacks with
    :class:`accelctl.MissingKernelError` (the operator, the layer, the ways out), from
    ``train()``; with ``ACCELCTL_CPU_FALLBACK=1`` the device's missing kernels run on the CPU
    instead (docs/missing-kernels.md).

    :raises accelctl.ProcessSetupError: as the Accelerate bridge's ``Accelerator`` (several
        processes or devices on an accelerator without a distributed backend, several devices
        outside a launcher, ...); several processes over a backend torch cannot carry the
        device's tensors over (``ddp_backend``, else the plugin's ``distributed_backend``);
        ``bf16`` on a device type that does not autocast;
        ``use_cpu=True`` on an accelerator whose devices are not CPUs; ``fsdp`` with
        FSDP1 (``fsdp_config`` version 1) elsewhere than on CUDA, or FSDP2 on a device that
        cannot run it (``accelctl.capabilities.fsdp_gaps``, checked in local rank 0); an
        Accelerate state made earlier in the process that does not match, or one replaced
        after these arguments were made (raised when the ``Trainer`` is made). A transformers
        release the bridge cannot run on is refused before, when the bridge is imported
        (:class:`accelctl.FrameworkVersionError`).
    """

    accelerator: str = field(
        default="auto",
        metadata={
            "help": "The accelctl accelerator: 'auto' (ACCELCTL_ACCELERATOR when set, else the "
            "available one of highest priority), 'gpu', or a name or alias ('npu', 'cpu')"
        },
    )
    devices: str = field(
        default="auto",
        metadata={
            "help": "The accelerator's devices: 'auto' (one per process the launcher started "
            "on this machine; the first one in a process started alone), a count or indices"
        },
    )
    if TYPE_CHECKING:  # transformers' fields this class reads and sets (mypy skips transformers)
        use_cpu: bool = False
        bf16: bool = False
        bf16_full_eval: bool = False
        mixed_precision: str = "no"
        fsdp: Any = None
        fsdp_plugin_args: dict[str, Any] | None = None
        parallelism_config: Any = None

    def __post_init__(self) -> None:
        place = self._accelctl_placed()
        handle, device = place.handle, place.device
        if place.world_size > 1:  # before the state is made, which joins the process group
            _refuse_unusable_backend(
                handle,
                device,
                place.world_size,
                self.ddp_backend or None,
                named_by=f"ddp_backend={self.ddp_backend!r}",
                leave_out="leave ddp_backend unset",
                accelerates_cpu=device.type == "cpu",
            )
        on_cpu = device.type == "cpu"
        if not on_cpu and self.use_cpu:
            raise accelctl.ProcessSetupError(
                f"use_cpu=True asks for the CPU, but accelctl accelerator "
                f"{known_name(handle)!r} runs on {device}: use accelerator='cpu' for the CPU "
                "(use_cpu is accelctl's choice)"
            )
        # Accelerate's own CPU set-up for an accelerator of CPUs; it drops DeepSpeed, which then
        # takes the bridge's set-up on CPUs too.
        self.use_cpu = on_cpu and not self.deepspeed
        bf16 = self.bf16, self.bf16_full_eval
        hide = not on_cpu and any(bf16)
        if hide:
            _check_bf16(handle, device)
            # transformers' own check knows its list of kinds only: ours stands in for it.
            self.bf16 = self.bf16_full_eval = False
        try:
            super().__post_init__()  # makes the state
        finally:
            if hide:
                self.bf16, self.bf16_full_eval = bf16
        if hide and self.bf16:
            self.mixed_precision = "bf16"
        if self.fsdp_plugin_args is not None and place.world_size > 1:
            self._accelctl_check_sharding(place, self.fsdp_plugin_args)

    def _accelctl_check_sharding(self, place: _Place, fsdp: dict[str, Any]) -> None:
        """Check FSDP by the Accelerate bridge's rules; build FSDP2's mesh on the plugin's device.

        transformers reads its ``fsdp`` arguments after the state is made, so each process checks
        them after joining the group. Accelerate builds FSDP2's device mesh from the
        ``ParallelismConfig`` the ``Trainer`` passes on; without one, ``fully_shard`` takes torch's
        current accelerator, whatever the plugin's device."""
        version = int(fsdp.get("fsdp_version", 1))
        sharded = check_sharding(
            place.handle,
            place.device,
            version,
            self.ddp_backend or place.handle.info.distributed_backend,
            asked=f"TrainingArguments(fsdp=...) with fsdp_config version {version}",
            fsdp2="fsdp_config={'version': 2}",
            without="TrainingArguments without fsdp",
        )
        if sharded and self.parallelism_config is None:
            from accelerate import ParallelismConfig

            self.parallelism_config = ParallelismConfig(dp_shard_size=place.world_size)

    @property
    def place_model_on_device(self) -> bool | None:
        """transformers' switch for integrations (None: the ``Trainer`` decides).

        With FSDP on a device whose tensors cannot take a CPU tensor's place (openreg's), True: the
        ``Trainer`` moves the model there, keeping its parameters (tied weights stay tied), before
        Accelerate's ``fully_shard``, which could not move it."""
        if getattr(self, "fsdp_plugin_args", None) is None:
            return None
        return True if replaces_parameters(self._accelctl_placed().device) else None

    @property
    def accelctl_accelerator(self) -> accelctl.AcceleratorHandle:
        """The accelctl accelerator these arguments run on."""
        return self._accelctl_placed().handle

    def _accelctl_placed(self) -> _Place:
        """Return where the plugin says this process runs, chosen once per process.

        Chosen once (refused there when it cannot run), and again in a process that unpickled these
        arguments (the ``Trainer`` saves them with each checkpoint; a plugin's handle is not saved).
        The bridge's patches are enabled first: the ``Trainer`` made with these arguments needs
        them."""
        place: _Place | None = self.__dict__.get("_accelctl_place")
        if place is None:
            enable()
            place = _Place(*_placement(self.accelerator, self.devices))
            self.__dict__["_accelctl_place"] = place
        return place

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_accelctl_place", "_accelctl_made", "_accelctl_checked"):
            state.pop(name, None)
        return state

    @property  # transformers' cached property, replaced
    def _setup_devices(self) -> torch.device:
        """Return this process's device, making the state on first use and checking it later.

        The state is made on first use, and checked again on a later use whenever Accelerate's state
        changed (``Trainer`` reads it when it is made), so that a state replaced meanwhile (by other
        arguments made since) is refused, not a run elsewhere."""
        place = self._accelctl_placed()
        if not self.__dict__.get("_accelctl_made"):
            self._accelctl_make_state(place)
            self.__dict__["_accelctl_made"] = True
            place.check(self.distributed_state, made_here=True)
            # Once per process, after the plugin's setup_device (made or found, the state is
            # on the plugin's device): ACCELCTL_CPU_FALLBACK, or the declared gaps refused.
            set_up_kernels(place.handle, place.device, rank=place.rank)
        elif _state_key() != self.__dict__.get("_accelctl_checked"):
            # Checked again only when Accelerate's state changed: Trainer reads the device
            # several times a step (docs/performance.md, "Against the peers").
            place.check(_current_state(), made_here=False)
            self.__dict__["_accelctl_checked"] = _state_key()
        return place.device

    def _accelctl_make_state(self, place: _Place) -> None:
        from accelerate.state import PartialState

        handle, device = place.handle, place.device
        if self.deepspeed:  # before the state, which starts DeepSpeed's process group
            from ._deepspeed.device import use_device

            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", place.world_size))
            use_device(handle, device, local_world_size, rank=place.rank)
        # A matching state is always used (below): transformers' switch for that goes.
        config = self.accelerator_config
        if isinstance(config, transformers.trainer_pt_utils.AcceleratorConfig):
            config.pop("use_configured_state", False)
        if PartialState._shared_state:
            # Made earlier in this process (an Accelerator, other TrainingArguments): used as
            # it stands when it matches (refused below otherwise), never dropped under the
            # objects that hold it, as transformers' own arguments would.
            state = PartialState()
        elif device.type == "cpu" and not ((self.fsdp and place.world_size > 1) or self.deepspeed):
            # Accelerate's own CPU set-up; FSDP and DeepSpeed on CPUs take the bridge's, as the
            # Accelerate bridge's do (Accelerate shards only on the device kinds it knows, and
            # drops DeepSpeed on its CPU set-up).
            state = PartialState(cpu=True, backend=self.ddp_backend)
        else:
            pending = _accelerate_state.Pending(handle, device, place.world_size > 1)
            # transformers' own arguments set Accelerate's variable for DeepSpeed while the
            # state is made (it then starts DeepSpeed's process group), and unset it after.
            deepspeed = {"ACCELERATE_USE_DEEPSPEED": "true"} if self.deepspeed else {}
            with _accelerate_state.building(pending), _environment(deepspeed):
                state = PartialState(backend=self.ddp_backend, timeout=self.ddp_timeout_delta)
        self.distributed_state = state
        self._n_gpu = 0 if device.type == "cpu" else 1  # one device per process


@dataclass(frozen=True)
class _Place:
    """Where the plugin says this process runs."""

    handle: accelctl.AcceleratorHandle
    device: torch.device
    rank: int
    world_size: int

    def check(self, state: _PartialState, *, made_here: bool) -> None:
        """Refuse an Accelerate state that does not run where the plugin says."""
        if state is not None and state.initialized:
            same_device = state.device == self.device or (
                self.device.type == "cpu" == state.device.type
            )
            if (
                same_device
                and state.num_processes == self.world_size
                and state.process_index == self.rank
            ):
                return
            found = (
                f"process {state.process_index} of {state.num_processes} on {state.device} "
                f"({state.distributed_type})"
            )
        else:
            found = "none"
        if not made_here:
            why = (
                "it was replaced after these TrainingArguments were made (other "
                "TrainingArguments, a PartialState or an Accelerator made since), and the "
                "Trainer would run there. Make these arguments last, or the others on the same "
                "accelerator"
            )
        else:
            why = (
                "it was made earlier in this process (a PartialState, an Accelerator or other "
                "TrainingArguments) on another device. Make these TrainingArguments first, or "
                "the earlier object on the same accelerator"
            )
        raise accelctl.ProcessSetupError(
            f"accelctl accelerator {known_name(self.handle)!r} runs process {self.rank} of "
            f"{self.world_size} on {self.device}, but Accelerate's state is {found}: {why}"
        )


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in ``os.environ`` inside the block, as they were after it."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _state_key() -> tuple[Any, ...]:
    """Return a key of Accelerate's process-wide state, read without making a state object.

    What :meth:`_Place.check` reads: a new key is a state made, replaced or reset since the last
    check."""
    from accelerate.state import PartialState

    shared = PartialState._shared_state
    return tuple(
        shared.get(name)
        for name in ("device", "num_processes", "process_index", "distributed_type")
    )


def _current_state() -> Any:
    from accelerate.state import PartialState

    return PartialState() if PartialState._shared_state else None


def _check_bf16(handle: accelctl.AcceleratorHandle, device: torch.device) -> None:
    """Refuse ``bf16`` where torch has no autocast for the device type."""
    import torch

    if not torch.amp.is_autocast_available(device.type):
        raise accelctl.ProcessSetupError(
            f"bf16=True autocasts on the device type, but torch has no autocast for "
            f"{device.type!r} (accelctl accelerator {known_name(handle)!r}): leave bf16 off, or "
            "cast the model yourself"
        )


def enable() -> tuple[Patch, ...]:
    """Replace the internals of transformers and Accelerate that the bridge adapts.

    They are transformers' ``Trainer._move_model_to_device`` and ``Trainer.train``, and the two of
    Accelerate's the Accelerate bridge adapts (docs/transformers.md); returns the records of what is
    replaced. Idempotent. The bridge's :class:`TrainingArguments` call it when they are made;
    importing the bridge replaces nothing. The replacements act only on a ``Trainer`` made with the
    bridge's arguments."""
    _transformers_state.install()
    _accelerate_state.install()
    return (*_transformers_state.PATCHES.applied(), *_accelerate_state.PATCHES.applied())


#: What the bridge adapts, the releases it is tested with, and why not adapted where not.
ADAPTATION = _transformers_state.ADAPTATION
#: True: importing the bridge refuses a release it cannot adapt (see :data:`ADAPTATION`).
ADAPTED: bool = ADAPTATION.refusal == ""

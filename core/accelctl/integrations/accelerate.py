"""HF Accelerate's ``Accelerator`` on any accelctl accelerator.

::

    from accelctl.integrations.accelerate import Accelerator

    accelerator = Accelerator("npu", mixed_precision="bf16")  # an accelerate.Accelerator
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

Accelerate keeps a fixed list of device kinds; a device it does not know trains on the CPU, and
under a launcher every process trains alone (``DistributedType.NO``), silently. This
``Accelerator`` is Accelerate's own, made on the accelctl plugin's choice instead: the plugin's
device for this process (``devices[LOCAL_RANK]`` under ``accelctl launch``, ``accelerate launch``
or ``torchrun``), its ``distributed_backend`` and DDP across the processes, autocast on its
device type; with ``fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2)``, FSDP2 on a
device mesh of the plugin's device type, where the device can run it
(``accelctl.capabilities.fsdp_gaps``); with a ``DeepSpeedPlugin``, DeepSpeed's engine, its
accelerator made the plugin's (``._deepspeed.device``), on CPU devices
too. A set-up that cannot run is refused here, with accelctl's error. The adaptation of
Accelerate's state is version-checked (:mod:`._accelerate.state`) and
applied by :func:`enable`, which the ``Accelerator`` calls; ``docs/accelerate.md`` lists what it
changes and why.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated, Any

from ._accelerate import state as _accelerate_state

try:
    # Before anything of Accelerate: a release the bridge cannot run on is refused here.
    _accelerate_state.ADAPTATION.require()
    import accelerate
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without Accelerate
    from ._shared.missing import framework_missing

    raise framework_missing("accelerate", "HF Accelerate", exc) from exc

import torch

import accelctl
from accelctl._choice.distributed_backend import (
    Started,
    backend_problem,
    named_backend_refusal,
    unusable_backend,
)
from accelctl._choice.selection import (
    known_name,  # the name a message uses: "openreg", not "privateuse1"
)
from accelctl._contract import (
    settings as _settings,  # the same distribution: released with the core
)
from accelctl._contract.errors import warn_user
from accelctl._kernels.setup import set_up_kernels
from accelctl._kernels.translate import raise_missing_kernel
from accelctl._launching.error_line import one_line_when_raised

from ._shared.kernel_errors import translate_forward
from ._shared.parameters import keeping_parameters, move_before_sharding
from ._shared.patching import Patch
from ._shared.sharding import refuse_fsdp_gaps

__all__ = ["ADAPTATION", "ADAPTED", "Accelerator", "enable"]

#: torchrun's variables that mark a process it started (all three set).
_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
#: Accelerate's state, as the bridge reads it (untyped: Accelerate ships no types); declared so
#: that the names the bridge uses of it are checked with the rest (tests/bridgeuses.py).
_State = Annotated[Any, "accelerate.state:AcceleratorState"]


class Accelerator(accelerate.Accelerator):  # type: ignore[misc]  # Accelerate ships no types
    """``accelerate.Accelerator`` on an accelctl accelerator.

    :param accelerator: what :func:`accelctl.resolve` takes: ``"auto"`` (``ACCELCTL_ACCELERATOR``
        when set, as ``accelctl launch`` sets it, else the available accelerator of highest
        priority), ``"gpu"``, a name or alias, or an :class:`accelctl.Accelerator` instance.
    :param devices: a devices spec of that accelerator. ``"auto"``: under a launcher,
        ``ACCELCTL_DEVICES`` when set, else one device per process the launcher started on this
        machine; in a process started alone, the accelerator's first device (Accelerate's
        single-process default). Process ``LOCAL_RANK`` takes ``devices[LOCAL_RANK]``.
    :param kwargs: Accelerate's own arguments (``mixed_precision``, ``kwargs_handlers``, ...).
        ``cpu`` is accelctl's choice (True for an accelerator whose devices are CPUs).

    :attr:`accelctl_accelerator` is the accelerator's :class:`~accelctl.AcceleratorHandle`.

    A kernel the device lacks, met in a prepared model's forward or in :meth:`backward`, is
    :class:`accelctl.MissingKernelError` (the operator, the layer, the ways out); with
    ``ACCELCTL_CPU_FALLBACK=1`` the device's missing kernels run on the CPU instead
    (docs/missing-kernels.md).

    :raises accelctl.ProcessSetupError: several processes or devices on an accelerator without a
        distributed backend, several devices outside a launcher, a launcher that started another
        number of processes than there are devices, several processes over a backend torch
        cannot carry the device's tensors over (``InitProcessGroupKwargs(backend=...)``'s, else
        the plugin's), or an Accelerate state that does not match
        the plugin (made earlier by something else). An Accelerate release the bridge cannot
        run on is refused before, when the bridge is imported
        (:class:`accelctl.FrameworkVersionError`).
    """

    @one_line_when_raised  # a refusal ends the script as accelctl's line, rank 0's alone
    def __init__(self, accelerator: Any = "auto", *, devices: Any = "auto", **kwargs: Any) -> None:
        if "cpu" in kwargs:
            raise TypeError(
                "Accelerator(cpu=...) is accelctl's choice here: use Accelerator('cpu') for the "
                "CPU, or another accelerator's name"
            )
        handle, device, rank, world_size = _placement(accelerator, devices)
        #: The accelctl accelerator this Accelerator runs on.
        self.accelctl_accelerator: accelctl.AcceleratorHandle = handle
        distributed = world_size > 1
        named = _named_backend(kwargs, handle, device) if distributed else None
        sharded = distributed and _prepare_sharding(kwargs, handle, device, world_size, named)
        deepspeed = _uses_deepspeed(kwargs)
        # Accelerate's own CPU set-up drops DeepSpeed: a DeepSpeed run on CPUs takes the bridge's.
        accelerates_cpu = device.type == "cpu" and not sharded and not deepspeed
        if distributed:  # before Accelerate makes the state, which joins the group
            _refuse_unusable_backend(
                handle,
                device,
                world_size,
                named,
                named_by=f"InitProcessGroupKwargs(backend={named!r})",
                leave_out="leave the backend out of InitProcessGroupKwargs (backend=None)",
                accelerates_cpu=accelerates_cpu,
            )
        if deepspeed:  # before Accelerate's state, which starts DeepSpeed's process group
            from ._deepspeed.device import use_device

            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
            use_device(handle, device, local_world_size if distributed else 1, rank=rank)
        if accelerates_cpu:
            super().__init__(cpu=True, **kwargs)  # Accelerate's own CPU set-up (gloo)
        else:
            pending = _accelerate_state.Pending(handle, device, distributed, named)
            with _accelerate_state.building(pending):
                super().__init__(**kwargs)
        _check_state(self.state, handle, device, world_size, rank)
        set_up_kernels(handle, device, rank=rank)  # once per process: after setup_device
        if device.type not in _accelerate_state.RANDOM_STATE_SAVED:
            self.register_for_checkpointing(_accelerate_state.DeviceRandomState(self, device))

    def prepare(self, *args: Any, device_placement: Any = None) -> Any:
        """Accelerate's ``prepare``, moving FSDP2 models to the device and naming missing kernels.

        With FSDP2, each model is first moved to this process's device where ``fully_shard`` could
        not move it there itself (``_parameters``). A kernel the device lacks in a model's forward
        is :class:`accelctl.MissingKernelError`, as for :meth:`prepare_model` (Accelerate prepares
        an FSDP2 model without it)."""
        models = [obj for obj in args if isinstance(obj, torch.nn.Module)]
        if self.is_fsdp2:
            for model in models:
                move_before_sharding(model, self.device)
        prepared = super().prepare(*args, device_placement=device_placement)
        for model in models:
            translate_forward(model, self.accelctl_accelerator.plugin_name, self.device)
        return prepared

    def prepare_model(self, model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        """Accelerate's ``prepare_model``, moving the model without replacing its parameters.

        An optimizer made before ``prepare`` so steps the model's parameters (``_parameters``); a
        kernel the device lacks in its forward is :class:`accelctl.MissingKernelError`
        (``_kernel_errors``)."""
        with keeping_parameters(self.device):
            prepared = super().prepare_model(model, *args, **kwargs)
        # The user's module, which a DDP or FSDP wrapper calls: the layers' paths are its own.
        translate_forward(model, self.accelctl_accelerator.plugin_name, self.device)
        return prepared

    def backward(self, loss: Any, **kwargs: Any) -> None:
        """Accelerate's ``backward``, naming a kernel the device lacks in the backward pass.

        The error is :class:`accelctl.MissingKernelError`, the operator named from ``loss``'s graph
        where torch's error names none."""
        try:
            super().backward(loss, **kwargs)
        except Exception as exc:
            raise_missing_kernel(
                exc,
                accelerator=self.accelctl_accelerator.plugin_name,
                device=self.device,
                loss=loss,
            )
            raise


def _named_backend(
    kwargs: dict[str, Any], handle: accelctl.AcceleratorHandle, device: torch.device
) -> str | None:
    """Return the backend that an ``InitProcessGroupKwargs`` in ``kwargs_handlers`` names, or None.

    None where none is named (the plugin's ``distributed_backend`` is then used).

    Accelerate's ``InitProcessGroupKwargs`` has ``backend="nccl"`` as its default and passes on
    only what differs from its defaults, so a handler's ``"nccl"`` cannot be told from no backend
    named (a handler given for its ``timeout``). Where nccl can carry the device's tensors it is
    used; elsewhere it is read as Accelerate reads it, no backend named, with a warning saying
    which backend is used instead and how to name one."""
    handler = next(
        (
            handler
            for handler in kwargs.get("kwargs_handlers") or ()
            if isinstance(handler, accelerate.utils.InitProcessGroupKwargs)
        ),
        None,
    )
    if handler is None or not handler.backend:
        return None
    backend: str = handler.backend
    defaults = {field.name: field.default for field in dataclasses.fields(handler)}
    problem = backend_problem(backend, device.type)
    if backend != defaults.get("backend") or problem is None or problem.skip:
        return backend
    used = _cpu_backend(None) if device.type == "cpu" else handle.info.distributed_backend
    warn_user(
        f"InitProcessGroupKwargs(backend={backend!r}) is Accelerate's default backend, which "
        f"Accelerate passes on as no backend named, and {backend!r} {problem}: the processes of "
        f"accelctl accelerator {known_name(handle)!r} join their group over {used!r}, on "
        f"{device.type!r} devices. Name backend={used!r} (or backend=None) in "
        "InitProcessGroupKwargs to say so"
    )
    return None


def _uses_deepspeed(kwargs: dict[str, Any]) -> bool:
    """Say whether this Accelerator runs DeepSpeed, as Accelerate reads its arguments.

    A ``deepspeed_plugin`` (or ``deepspeed_plugins``) given, or ``accelerate launch
    --use_deepspeed``'s variable, as Accelerate reads them."""
    if kwargs.get("deepspeed_plugin") is not None or kwargs.get("deepspeed_plugins") is not None:
        return True
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def _cpu_backend(named: str | None) -> str:
    """Return the backend that Accelerate's own CPU set-up joins the group over.

    That is Accelerate's own CPU set-up (``cpu=True``), whatever is named: MPI where it is named or
    none is, and torch has it; else gloo."""
    mpi = torch.distributed.is_available() and torch.distributed.is_mpi_available()
    return "mpi" if named in (None, "mpi") and mpi else "gloo"


def _refuse_unusable_backend(
    handle: accelctl.AcceleratorHandle,
    device: torch.device,
    world_size: int,
    named: str | None,
    *,
    named_by: str,
    leave_out: str,
    accelerates_cpu: bool,
) -> None:
    """Refuse a backend that cannot carry ``device``'s tensors, before the process group is joined.

    Refused in each of the launcher's ``world_size`` processes: the backend ``named`` by the user
    (``named_by`` says where), else the plugin's ``distributed_backend``; and, where Accelerate's
    own CPU set-up makes the state (``accelerates_cpu``), a named backend it does not run (gloo, or
    MPI where torch has it). The transformers bridge refuses ``ddp_backend`` here too.

    :raises accelctl.ProcessSetupError: naming the backend and the one torch has for the device.
    """
    started = Started(world_size, "the launcher")
    shown = known_name(handle)
    if named is None:
        refusal = unusable_backend(handle, device.type, shown, started)
    else:
        own = handle.info.distributed_backend
        refusal = named_backend_refusal(
            named,
            device.type,
            named_by=named_by,
            accelerator=shown,
            leave_out=f"{leave_out}: the accelerator's distributed_backend {own!r} is used",
            started=started,
        )
    if refusal is None and accelerates_cpu and named is not None and named != _cpu_backend(named):
        # Accelerate would raise its own ValueError ("is not available, please use gloo").
        refusal = (
            f"{named_by} names the torch.distributed backend {named!r} for accelctl accelerator "
            f"{shown!r}, whose devices are CPUs: Accelerate's own CPU set-up, which the bridge "
            f"uses for them, joins the process group over {_cpu_backend(named)!r} only: "
            f"{started.outcome()}. To fix it, name {_cpu_backend(named)!r} there, or {leave_out}"
        )
    if refusal is not None:
        raise accelctl.ProcessSetupError(refusal)


def _prepare_sharding(
    kwargs: dict[str, Any],
    handle: accelctl.AcceleratorHandle,
    device: torch.device,
    world: int,
    named: str | None,
) -> bool:
    """Say whether this Accelerator shards with FSDP2, and add to ``kwargs`` what FSDP2 needs.

    With several processes: an ``fsdp_plugin``, or ``accelerate launch --use_fsdp``'s variables.
    Then ``kwargs`` carry what Accelerate needs for it on the plugin's device: the plugin, and a
    ``ParallelismConfig`` over every process when none is given, so that Accelerate builds the
    device mesh on the plugin's device type (without one, ``fully_shard`` takes torch's current
    accelerator, whatever the plugin's device). What cannot run over the ``named`` backend (the
    plugin's when None) is refused first."""
    plugin = kwargs.get("fsdp_plugin")
    if plugin is None and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        plugin = accelerate.FullyShardedDataParallelPlugin()  # Accelerate's reading of them
    if plugin is None:
        return False
    sharded = check_sharding(
        handle,
        device,
        plugin.fsdp_version,
        named or handle.info.distributed_backend,
        asked=f"FullyShardedDataParallelPlugin(fsdp_version={plugin.fsdp_version})",
        fsdp2="FullyShardedDataParallelPlugin(fsdp_version=2) "
        "(accelerate launch: --fsdp_version 2)",
        without="an Accelerator without an fsdp_plugin",
    )
    if not sharded:
        return False
    kwargs["fsdp_plugin"] = plugin
    if kwargs.get("parallelism_config") is None:
        kwargs["parallelism_config"] = accelerate.ParallelismConfig(dp_shard_size=world)
    return True


def check_sharding(
    handle: accelctl.AcceleratorHandle,
    device: torch.device,
    version: int,
    backend: str | None,
    *,
    asked: str,
    fsdp2: str,
    without: str,
) -> bool:
    """Say whether Accelerate's FSDP ``version`` runs through the bridge; refuse what cannot.

    On ``device`` over ``backend``: True for FSDP2, False for FSDP1 on CUDA (Accelerate's own);
    refused otherwise, as are FSDP2 without the adaptation of Accelerate's state and FSDP2 on a
    device with gaps (``_sharding``). The transformers bridge checks its ``fsdp`` arguments here
    too. (An Accelerate whose state the bridge cannot adapt is refused when the bridge is imported.)

    :param asked: how the user asked for FSDP, for the messages.
    :param fsdp2: how to ask for FSDP2 instead of FSDP1.
    :param without: how to ask for DDP instead.
    """
    if version != 2:
        if device.type == "cuda":
            return False  # Accelerate's own FSDP1 on its own device
        raise accelctl.ProcessSetupError(
            f"{asked} wraps the model in FSDP1, which the accelctl bridge does not adapt for "
            f"{device.type!r} devices (accelerator {handle.name!r}). Use {fsdp2}"
        )
    refuse_fsdp_gaps(handle, device.type, backend, asked, without)
    return True


def _placement(
    accelerator: Any, devices: Any
) -> tuple[accelctl.AcceleratorHandle, torch.device, int, int]:
    """Return the accelerator, device, rank and process count from the launcher's variables.

    Without them: one process, started alone. Refused as the ``Accelerator`` documents; the
    transformers bridge places its processes by the same rule."""
    launched = all(name in os.environ for name in _LAUNCH_VARIABLES)
    rank = int(os.environ.get("RANK", 0)) if launched else 0
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if launched else 0
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if launched else 1
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) if launched else 1
    automatic = isinstance(devices, str) and devices.strip().lower() == "auto"
    if automatic and not _settings.SelectionVariables.read().devices:
        devices = local_world_size  # one device per process (one, started alone)
    selection = accelctl.resolve(accelerator, devices)
    handle = selection.accelerator
    device = _this_process_device(selection, launched, local_rank, local_world_size, world_size)
    return handle, device, rank, world_size


def _this_process_device(
    selection: accelctl.Selection,
    launched: bool,
    local_rank: int,
    local_world_size: int,
    world_size: int,
) -> torch.device:
    """``devices[LOCAL_RANK]``, once the devices are known to fit the processes."""
    devices, handle = selection.devices, selection.accelerator
    listed = ", ".join(str(device) for device in devices)
    if (len(devices) > 1 or world_size > 1) and handle.info.distributed_backend is None:
        asked = f"{len(devices)} devices ({listed})" if len(devices) > 1 else ""
        asked = asked or f"{world_size} processes (started by a launcher)"
        raise accelctl.ProcessSetupError(
            f"accelctl accelerator {known_name(handle)!r} runs in a single process only (its "
            f"distributed_backend is None), but {asked} were asked for, so Accelerate would "
            "train each process alone. Run one process on one device (devices=1, no "
            "launcher), or pick an accelerator with a distributed backend"
        )
    if len(devices) > 1 and not launched:
        raise accelctl.ProcessSetupError(
            f"{selection.asked_devices} on {selection.shown_name!r} needs one "
            f"process per device, started by a launcher; this process was started alone. Run: "
            f"accelctl launch --accelerator {selection.shown_name} --devices "
            f"{selection.given_devices} <your script> (or "
            f"accelerate launch --multi_gpu --num_processes {len(devices)} <your script>)"
        )
    if launched and len(devices) != local_world_size:
        raise accelctl.ProcessSetupError(
            f"the launcher started {local_world_size} process(es) on this machine, but the "
            f"Accelerator has {len(devices)} {selection.shown_name} device(s) ({listed}). Leave "
            "devices='auto' to take one device per process"
        )
    device = devices[local_rank]
    if world_size > 1 and device.type != "cpu" and device.index != local_rank:
        # Accelerate hands DDP device_ids=[local process index]: they must agree.
        raise accelctl.ProcessSetupError(
            f"process {local_rank} of this machine would run on {device}, but Accelerate gives "
            f"DDP the device index {local_rank}. Launch on the devices in order (--devices "
            f"{local_world_size})"
        )
    return device


def _check_state(
    state: _State, handle: accelctl.AcceleratorHandle, device: torch.device, world: int, rank: int
) -> None:
    """Refuse an Accelerate state, made by other code, that does not run where the plugin says.

    Such a state was made before this Accelerator."""
    same_device = state.device == device or (device.type == "cpu" == state.device.type)
    if same_device and state.num_processes == world and state.process_index == rank:
        return
    why = (
        "Accelerate's state was made before this Accelerator (a PartialState, an Accelerator "
        "or a transformers TrainingArguments made earlier in this process); make this "
        "Accelerator first"
    )
    raise accelctl.ProcessSetupError(
        f"accelctl accelerator {handle.name!r} runs process {rank} of {world} on {device}, but "
        f"Accelerate's state is process {state.process_index} of {state.num_processes} on "
        f"{state.device} ({state.distributed_type}): {why}"
    )


def enable() -> tuple[Patch, ...]:
    """Replace the two internals of Accelerate's state that the bridge adapts.

    They are ``PartialState._prepare_backend`` and ``set_device`` (docs/accelerate.md); returns the
    records of what is replaced. Idempotent. The bridge's :class:`Accelerator` and the transformers
    bridge's ``TrainingArguments`` call it before they make Accelerate's state; importing the bridge
    replaces nothing. The replacements act only while the bridge makes a state: at any other time
    they call Accelerate's own methods."""
    _accelerate_state.install()
    return _accelerate_state.PATCHES.applied()


#: What the bridge adapts, the releases it is tested with, and why not adapted where not.
ADAPTATION = _accelerate_state.ADAPTATION
#: True: importing the bridge refuses a release it cannot adapt (see :data:`ADAPTATION`).
ADAPTED: bool = ADAPTATION.refusal == ""

"""The one adaptation of Lightning's internals that the bridge makes (``docs/lightning.md``).

Lightning's connectors (``_AcceleratorConnector`` for the Trainer, ``_Connector`` for Fabric)
make three choices by accelerator *type* or *name*, and offer an accelerator no public way to take
part in them:

1. ``strategy="auto"`` with one device: ``SingleDeviceStrategy(device="cpu")`` for any
   accelerator that is not Lightning's own CUDA or MPS one (and an error for the name "hpu");
2. the DDP process-group backend: torch's default for the device type, never the backend the
   plugin declares, and a DDP strategy even where the plugin has no backend at all;
3. ``precision="16-mixed"`` / ``"bf16-mixed"``: autocast on ``"cuda"`` for every accelerator but
   Lightning's ``"cpu"`` and ``"mps"``.

and their DDP strategies (the Trainer's and Fabric's) assume that a device that is not a CPU is a
CUDA GPU with NCCL:

4. the model is wrapped in DDP inside a new ``torch.cuda.Stream`` (every rank dies on a machine
   without CUDA);
5. ``"mean"`` is reduced with ``ReduceOp.AVG`` on every backend but gloo, integer tensors included
   (the logged metrics' batch sizes), as NCCL allows; a vendor's backend may not (``occl``);

and Fabric assumes that moving a model keeps its parameters (all but XLA):

6. ``Fabric.setup(model, optimizer)`` leaves the optimizer on the CPU tensors where the device's
   tensors replace the ``Parameter`` objects (``_parameters``).

Sharded training: ``ModelParallelStrategy`` (FSDP2, ``fully_shard`` on a device mesh of the root
device's type) is device-generic but for the choices of 2 and 5 (its backend, its ``reduce`` /
``all_reduce``), and FSDP2 itself needs things of a device that a vendor's may lack;
``FSDPStrategy`` (FSDP1) is CUDA-only, builds its mesh on ``"cuda"``, and Lightning's refusal
names CUDA accelerators only:

7. ``ModelParallelStrategy`` where the device cannot run FSDP2: every rank dies in torch;
8. ``strategy="fsdp"`` / ``FSDPStrategy``: "requires a GPU accelerator ... pass a
   ``CUDAAccelerator()``";
9. ``ModelParallelStrategy`` binds its process group to the root device (``device_id``, Lightning
   2.4 and later), and torch then builds the 2-D mesh's subgroups with ``split_group``, which
   only backends that can split (NCCL, XCCL) support: on any other (``occl``) every rank dies in
   ``init_device_mesh`` ("its backend does not support splitting");
10. the model is on the CPU when ``configure_model`` (the Trainer) or the ``parallelize_fn``
    (Fabric) calls ``fully_shard``, which moves it to the mesh's device in a way that raises
    where the device's tensors cannot take a CPU tensor's place (openreg's; ``_parameters``).

and the Trainer's ``DeepSpeedStrategy`` (``strategy="deepspeed_stage_2"`` and the like):

11. its ``setup_environment`` refuses every accelerator but Lightning's ``CUDAAccelerator``, and
    DeepSpeed itself would take its accelerator from its own list of devices.

For accelctl's accelerators only (``is_bridge``), :func:`install` wraps the three connector
methods that make these choices, so that they follow the plugin: its device, its
``distributed_backend`` (for DDP and ``ModelParallelStrategy``), autocast on its device type;
``_init_strategy`` also refuses a ``ModelParallelStrategy`` with the FSDP2 gaps
``accelctl.capabilities.fsdp_gaps`` finds, and ``_check_strategy_and_fallback`` an FSDP1
strategy naming the sharded path that runs; ``ModelParallelStrategy``'s ``_setup_distributed``, so
that a group whose backend cannot split is not bound to a device (torch then makes the mesh's
subgroups with ``new_group``, as it does for any unbound group) and the Trainer's model is on its
device before ``configure_model`` where ``fully_shard`` could not move it; Fabric's
``setup`` and ``setup_module``, which move the model keeping its parameters; and
``DeepSpeedStrategy.setup_environment``, which makes DeepSpeed's accelerator the plugin's on the
process's root device (``_deepspeed_device``) instead of refusing it, then runs DDP's set-up (the
device, DeepSpeed's process group over the plugin's backend). Every other accelerator
goes through Lightning's code unchanged. 4 and 5 are no patches: DDP's model wrap (on the
current stream, as plain PyTorch builds it) and the mean reductions (a sum divided by the world
size, what Lightning does for gloo) are set on the run's strategy object (:mod:`.strategy`),
the Trainer's by the public ``Accelerator.setup``, Fabric's by the ``_init_strategy`` wrap.
Each wrap goes through :data:`PATCHES`
(``_shared/patching.py``: recorded, once, undoable), applied by :func:`install` when the bridge's
``enable()`` runs (a bound ``LightningAccelerator`` class is made), never when the bridge is
imported. Most wrapped methods are private: :data:`ADAPTATION` declares each with the parameters
the wrapper passes on, and importing the bridge refuses a release where one changed
(``accelctl.integrations._shared.versions``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import torch

from accelctl import PrecisionError, ProcessSetupError
from accelctl._choice.selection import (
    known_name,  # the name a message uses: "openreg", not "privateuse1"
)

from .._shared.parameters import keeping_parameters, move_before_sharding
from .._shared.patching import Patches
from .._shared.sharding import refuse_fsdp_gaps
from .adaptation import ADAPTATION as _ADAPTATION
from .adaptation import (
    FABRIC,
    FABRIC_CONNECTOR,
    FABRIC_SHARDED,
    TRAINER_CONNECTOR,
    TRAINER_DEEPSPEED,
    TRAINER_SHARDED,
)
from .strategy import adapt_fabric

#: Every method :func:`install` wraps and every name of Lightning the bridge uses (checked when
#: the bridge is imported, before torch and Lightning are).
ADAPTATION = _ADAPTATION

# What the wrappers below are handed, untyped to mypy (Lightning's own types are narrower than
# what the wrappers do with them): declared here as the framework's classes, so that the names
# the bridge uses of them are checked with the rest (tests/bridgeuses.py reads these).
_Connector = Annotated[
    Any,
    "lightning.pytorch.trainer.connectors.accelerator_connector:_AcceleratorConnector",
    "lightning.fabric.connector:_Connector",
]
_Sharded = Annotated[
    Any,
    "lightning.pytorch.strategies:ModelParallelStrategy",
    "lightning.fabric.strategies:ModelParallelStrategy",
]
_MixedPrecision = Annotated[
    Any,
    "lightning.pytorch.plugins.precision:MixedPrecision",
    "lightning.fabric.plugins.precision:MixedPrecision",
]
_Fabric = Annotated[Any, "lightning.fabric:Fabric"]
_DeepSpeed = Annotated[Any, "lightning.pytorch.strategies:DeepSpeedStrategy"]

#: What :func:`install` replaced (docs/design/bridge-patching.md).
PATCHES = Patches(ADAPTATION)

#: The warning of a GradScaler made for "cuda" on a machine without CUDA (torch's wording).
_CUDA_SCALER_WARNING = r".*GradScaler is enabled, but CUDA is not available"
#: What torch says of the deprecated torch.cuda.amp.GradScaler that Lightning 2.3 makes.
_CUDA_AMP_SCALER_WARNING = r".*torch\.cuda\.amp\.GradScaler\(args\.\.\.\)` is deprecated"


def lightning_version() -> str:
    """The installed Lightning's version string."""
    import lightning

    return str(lightning.__version__)


def is_active() -> bool:
    """True when the adaptation is installed in this process."""
    return len(PATCHES.applied()) == len(ADAPTATION.internals) - 1  # all but _FSDP_ALIASES


def install(is_bridge: Callable[[object], bool]) -> bool:
    """Wrap the connector, strategy and Fabric methods that the Lightning bridge adapts.

    The module's docstring lists them. For accelerators where ``is_bridge`` holds, through
    :data:`PATCHES`. Idempotent. Returns True: a release where a wrapped method changed is
    refused before, when the bridge is imported (:data:`ADAPTATION`); a release outside the
    tested window whose methods are all there is adapted, with a warning."""
    if is_active():
        return True
    ADAPTATION.require()  # done when the bridge was imported: refused there otherwise
    from lightning.fabric.plugins.precision import MixedPrecision as FabricMixedPrecision
    from lightning.fabric.strategies.ddp import DDPStrategy as FabricDDP
    from lightning.fabric.strategies.fsdp import _FSDP_ALIASES
    from lightning.fabric.strategies.fsdp import FSDPStrategy as FabricFSDP
    from lightning.fabric.strategies.model_parallel import ModelParallelStrategy as FabricSharded
    from lightning.fabric.strategies.parallel import ParallelStrategy as FabricParallel
    from lightning.fabric.strategies.single_device import SingleDeviceStrategy as FabricSingle
    from lightning.pytorch.plugins.precision import MixedPrecision
    from lightning.pytorch.strategies import (
        DDPStrategy,
        FSDPStrategy,
        ModelParallelStrategy,
        ParallelStrategy,
        SingleDeviceStrategy,
    )

    trainer = _Kinds(
        single=SingleDeviceStrategy,
        ddp=DDPStrategy,
        parallel=ParallelStrategy,
        mixed=MixedPrecision,
        owner="Trainer",
        sharded=ModelParallelStrategy,
        fsdp=FSDPStrategy,
        fsdp_names=tuple(FSDPStrategy.get_registered_strategies()),
    )
    fabric = _Kinds(
        single=FabricSingle,
        ddp=FabricDDP,
        parallel=FabricParallel,
        mixed=FabricMixedPrecision,
        owner="Fabric",
        sharded=FabricSharded,
        fsdp=FabricFSDP,
        fsdp_names=tuple(_FSDP_ALIASES),
        adapt=adapt_fabric,
    )
    _wrap(TRAINER_CONNECTOR, trainer, "_precision_plugin_flag", is_bridge)
    _wrap(FABRIC_CONNECTOR, fabric, "_precision_instance", is_bridge)
    for strategy in (TRAINER_SHARDED, FABRIC_SHARDED):
        _wrap_setup_distributed(strategy, is_bridge)
    _wrap_deepspeed_environment(DDPStrategy, is_bridge)
    for name in ("setup", "setup_module"):
        _wrap_fabric_setup(name, is_bridge, FabricSharded)
    return True


@dataclass(frozen=True)
class _Kinds:
    """The classes one connector (the Trainer's or Fabric's) builds its choices from."""

    single: Any
    ddp: Any
    parallel: Any
    mixed: Any
    owner: str
    #: ``ModelParallelStrategy``: FSDP2 (``fully_shard``) on a device mesh of the root device's
    #: type, the sharded path that accelctl's accelerators take.
    sharded: Any
    #: ``FSDPStrategy`` (FSDP1), and the strategy names that make one.
    fsdp: Any
    fsdp_names: tuple[str, ...]
    #: What ``_init_strategy`` does to the strategy it made, on an accelctl accelerator:
    #: Fabric's DDP model wrap and reductions, set on the strategy object
    #: (:func:`~._lightning.strategy.adapt_fabric`). None for the Trainer, whose strategy gets
    #: them from ``Accelerator.setup``.
    adapt: Callable[[Any], None] | None = None


def _wrap(
    connector: str, kinds: _Kinds, precision_flag: str, is_bridge: Callable[[object], bool]
) -> None:
    def wrap_choose(choose: Any) -> Any:
        interactive = sys.modules[choose.__module__]

        def _choose_strategy(self: _Connector) -> Any:
            if not is_bridge(self.accelerator):
                return choose(self)
            shell = bool(getattr(interactive, "_IS_INTERACTIVE", False))
            return _auto_strategy(self, kinds, shell)

        return _choose_strategy

    def wrap_check_fallback(check_fallback: Any) -> Any:
        def _check_strategy_and_fallback(self: _Connector) -> None:
            if is_bridge(self.accelerator):
                _refuse_fsdp1(self, kinds)
            check_fallback(self)

        return _check_strategy_and_fallback

    def wrap_init_strategy(init_strategy: Any) -> Any:
        def _init_strategy(self: _Connector) -> None:
            init_strategy(self)
            if is_bridge(self.accelerator):
                _check_strategy(self, kinds)
                if kinds.adapt is not None:
                    kinds.adapt(self.strategy)

        return _init_strategy

    def wrap_init_precision(init_precision: Any) -> Any:
        def _check_and_init_precision(self: _Connector) -> Any:
            if not is_bridge(self.accelerator):
                return init_precision(self)
            with warnings.catch_warnings():
                # For "16-mixed" Lightning makes a GradScaler for "cuda", which warns that CUDA
                # is missing (and, on 2.3, that its class is deprecated); that plugin is
                # replaced below by one for the plugin's device type.
                warnings.filterwarnings("ignore", _CUDA_SCALER_WARNING, UserWarning)
                warnings.filterwarnings("ignore", _CUDA_AMP_SCALER_WARNING, FutureWarning)
                precision = init_precision(self)
            return _precision(self.accelerator, precision, getattr(self, precision_flag), kinds)

        return _check_and_init_precision

    owner = kinds.owner
    PATCHES.apply(
        connector,
        "_choose_strategy",
        wrap_choose,
        f"strategy='auto' on the plugin's own device ({owner}, accelctl accelerators only)",
    )
    PATCHES.apply(
        connector,
        "_check_strategy_and_fallback",
        wrap_check_fallback,
        f"FSDP1 refused naming the sharded path that runs ({owner}, accelctl accelerators only)",
    )
    PATCHES.apply(
        connector,
        "_init_strategy",
        wrap_init_strategy,
        f"the plugin's distributed backend, and its FSDP2 gaps refused ({owner}, accelctl "
        "accelerators only)",
    )
    PATCHES.apply(
        connector,
        "_check_and_init_precision",
        wrap_init_precision,
        f"mixed precision autocasts on the plugin's device type ({owner}, accelctl "
        "accelerators only)",
    )


def _is(obj: object, kind: Any) -> bool:
    # isinstance without mypy's narrowing to ``object`` (the kinds are typed Any).
    return isinstance(obj, kind)


def _auto_strategy(connector: _Connector, kinds: _Kinds, interactive: bool) -> Any:
    """Apply Lightning's rule for ``strategy="auto"`` with the plugin's own device.

    For one device (Lightning gives unknown accelerators ``"cpu"``), and without Lightning's refusal
    of the name ``"hpu"``, which is aimed at Lightning's own, removed HPU accelerator."""
    devices = list(connector._parallel_devices)
    if connector._num_nodes_flag > 1:
        return "ddp"
    if len(devices) <= 1:
        return kinds.single(device=devices[0] if devices else "cpu")
    return "ddp_fork" if interactive else "ddp"


def _check_strategy(connector: _Connector, kinds: _Kinds) -> None:
    """Refuse a distributed strategy for a plugin without a backend; give DDP the plugin's.

    A plugin without a backend is one torch has none for: every rank would die in
    ``init_process_group``. A distributed strategy is one that starts ``torch.distributed``; a
    DDP strategy takes the plugin's backend where it names none."""
    strategy = connector.strategy
    if not _is(strategy, kinds.parallel):
        return
    accelerator = connector.accelerator
    handle = type(accelerator).accelctl_handle()
    backend = handle.info.distributed_backend
    if backend is None:
        devices = list(connector._parallel_devices)
        processes = max(len(devices), 1) * connector._num_nodes_flag
        raise ProcessSetupError(
            f"accelctl accelerator {known_name(handle)!r} runs in a single process only (its "
            f"distributed_backend is None), but {kinds.owner}(strategy=...) chose "
            f"{type(strategy).__name__}, which starts torch.distributed for {processes} "
            f"process(es) over {connector._num_nodes_flag} node(s); torch has no backend for its "
            f"devices. Use devices=1, num_nodes=1 and strategy='auto', or an accelerator with a "
            f"distributed backend"
        )
    if not (_is(strategy, kinds.ddp) or _is(strategy, kinds.sharded)):
        return
    chosen = strategy.process_group_backend
    if chosen is None:
        # DDPStrategy and ModelParallelStrategy keep the backend they were given here and fall
        # back to torch's default for the device type only when it is None (their
        # setup_distributed / _setup_distributed).
        strategy._process_group_backend = chosen = backend
    elif chosen != backend:
        warnings.warn(
            f"accelctl accelerator {handle.name!r} runs several processes over {backend!r}, "
            f"but the strategy names {chosen!r}; leave process_group_backend unset to use "
            f"the plugin's",
            UserWarning,
            stacklevel=5,
        )
    if _is(strategy, kinds.sharded):
        devices = list(connector._parallel_devices)
        device_type = devices[0].type if devices else "cpu"
        refuse_fsdp_gaps(
            handle,
            device_type,
            chosen,
            f"{kinds.owner}(strategy=ModelParallelStrategy(...))",
            "strategy='ddp'",
        )


def _refuse_fsdp1(connector: _Connector, kinds: _Kinds) -> None:
    """Refuse ``strategy="fsdp"`` (FSDP1) on an accelctl accelerator, naming what runs.

    That is ``FSDPStrategy``. Lightning's refusal names CUDA accelerators only; this one names
    the sharded path that does run."""
    flag = connector._strategy_flag
    if not ((isinstance(flag, str) and flag in kinds.fsdp_names) or type(flag) is kinds.fsdp):
        return
    given = repr(flag) if isinstance(flag, str) else "FSDPStrategy(...)"
    name = type(connector.accelerator).name()
    if kinds.owner == "Trainer":
        how = "ModelParallelStrategy(data_parallel_size=<processes>, tensor_parallel_size=1) "
        how += "and torch's fully_shard applied in the LightningModule's configure_model()"
    else:
        how = "ModelParallelStrategy(parallelize_fn, data_parallel_size=<processes>, "
        how += "tensor_parallel_size=1), parallelize_fn applying torch's fully_shard"
    raise ValueError(
        f"{kinds.owner}(strategy={given}) wraps the model in FSDP1, which Lightning "
        f"{lightning_version()} runs on CUDA accelerators only. On accelctl accelerator {name!r} "
        f"shard with FSDP2 through Lightning's {how} (docs/lightning.md, 'Sharded training')"
    )


def _precision(accelerator: Any, precision: _MixedPrecision, given: Any, kinds: _Kinds) -> Any:
    """Autocast mixed precision on the plugin's device type.

    Lightning picks ``"cuda"`` for every accelerator it does not know. A device type torch has no
    autocast for is refused."""
    if not _is(precision, kinds.mixed):
        return precision
    device_type = type(accelerator).device_type()
    if device_type is None or precision.device == device_type:
        return precision
    name = type(accelerator).name()
    if given is not None:  # the user's own plugin: theirs to choose, but say what it does
        warnings.warn(
            f"MixedPrecision autocasts on {precision.device!r}, but accelctl accelerator "
            f"{name!r} runs on {device_type!r} devices, so autocast has no effect there; use "
            f"MixedPrecision({precision.precision!r}, device={device_type!r})",
            UserWarning,
            stacklevel=5,
        )
        return precision
    if not torch.amp.is_autocast_available(device_type):
        raise PrecisionError(
            f"precision={precision.precision!r} needs torch.autocast on the devices of accelctl "
            f"accelerator {name!r}, and torch has no autocast for {device_type!r} devices. Use "
            "precision='32-true', or 'bf16-true' / '16-true' (no autocast)"
        )
    # The scaler for the plugin's device type, named (Lightning 2.4 and later make the same
    # one; 2.3 makes a CUDA scaler whatever the device).
    scaler = torch.amp.GradScaler(device_type) if precision.precision == "16-mixed" else None
    return kinds.mixed(precision.precision, device=device_type, scaler=scaler)


def _wrap_setup_distributed(strategy: str, is_bridge: Callable[[object], bool]) -> None:
    """Set up ``ModelParallelStrategy``'s distributed state on an accelctl accelerator.

    The process group it made stays bound to the root device only where its backend can split it;
    the Trainer's model (Fabric's strategy has none yet) is moved to the root device where
    ``fully_shard``, called next by ``configure_model``, could not move it."""

    def wrap(original: Any) -> Any:
        def setup_distributed(self: _Sharded) -> None:
            original(self)
            if is_bridge(self.accelerator):
                unbind_unless_splitting(self.root_device)
                module = getattr(self, "lightning_module", None)
                if isinstance(module, torch.nn.Module):
                    move_before_sharding(module, self.root_device)

        return setup_distributed

    PATCHES.apply(
        strategy,
        "_setup_distributed",
        wrap,
        "the group unbound where its backend cannot split; the model moved before sharding",
    )


def _wrap_deepspeed_environment(ddp: type, is_bridge: Callable[[object], bool]) -> None:
    """Set up ``DeepSpeedStrategy``'s environment on an accelctl accelerator.

    DeepSpeed's accelerator is made the plugin's on this process's root device, then DDP's set-up
    runs (the device's, then DeepSpeed's process group over the plugin's backend, which
    ``_check_strategy`` gave the strategy); Lightning's refusal of every accelerator but its CUDA
    one stays for the others."""

    def wrap(original: Any) -> Any:
        def setup_environment(self: _DeepSpeed) -> None:
            if not is_bridge(self.accelerator):
                original(self)
                return
            from .._deepspeed.device import use_device

            handle = type(self.accelerator).accelctl_handle()
            devices = list(self.parallel_devices or ())  # one per process on this machine
            use_device(handle, self.root_device, len(devices) or 1, rank=self.global_rank)
            if devices and all(device.type == "cpu" for device in devices):
                # DeepSpeed runs process i on device index i, and Lightning checks the devices'
                # indices and hands DeepSpeed the root device's: CPU devices are given theirs
                # (torch.device("cpu", i) is the CPU, whatever i).
                self.parallel_devices = [torch.device("cpu", i) for i in range(len(devices))]
            ddp.setup_environment(self)  # type: ignore[attr-defined]

        return setup_environment

    PATCHES.apply(
        TRAINER_DEEPSPEED,
        "setup_environment",
        wrap,
        "DeepSpeed's accelerator made the plugin's, instead of refusing all but CUDA's",
    )


def unbind_unless_splitting(device: torch.device) -> None:
    """Unbind the default process group from ``device`` where its backend cannot split groups.

    torch's ``DeviceMesh`` makes the subgroups of a mesh of 2 or more dimensions
    with ``split_group`` whenever the default group is bound to a device, and ``split_group``
    refuses a backend without ``supports_splitting``; an unbound group's subgroups are made with
    ``new_group``, which every backend supports. A bound group lets NCCL connect eagerly; a
    backend that cannot split loses nothing it had."""
    group = torch.distributed.group.WORLD
    if group is None or getattr(group, "bound_device_id", None) is None:
        return
    try:
        backend = group._get_backend(device)
    except RuntimeError:  # no backend for this device type in the group: nothing splits
        backend = None
    if not getattr(backend, "supports_splitting", False):
        group.bound_device_id = None


def _wrap_fabric_setup(name: str, is_bridge: Callable[[object], bool], sharded: type) -> None:
    """Move the model in ``Fabric.setup`` without replacing its parameters.

    Also ``setup_module``. Before ``ModelParallelStrategy``'s ``parallelize_fn`` shards it,
    where ``fully_shard`` could not move it."""

    def wrap(original: Any) -> Any:
        def setup(self: _Fabric, *args: Any, **kwargs: Any) -> Any:
            strategy = self._strategy
            if not is_bridge(strategy.accelerator):
                return original(self, *args, **kwargs)
            module = args[0] if args else kwargs.get("module")
            moving = kwargs.get("move_to_device", True)
            if _is(strategy, sharded) and moving and isinstance(module, torch.nn.Module):
                move_before_sharding(module, strategy.root_device)
            with keeping_parameters(strategy.root_device):
                return original(self, *args, **kwargs)

        return setup

    PATCHES.apply(FABRIC, name, wrap, "the model moves keeping its Parameter objects")

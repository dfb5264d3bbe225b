"""The DDP model wrap and mean reductions, set on the run's strategy object.

Lightning's ``DDPStrategy`` assumes that a device that is not a CPU is a CUDA GPU with NCCL: it
wraps the model in DDP inside a new ``torch.cuda.Stream``, and ``DDPStrategy`` and
``ModelParallelStrategy`` reduce a ``"mean"`` with ``ReduceOp.AVG`` on every backend but gloo,
integer tensors included, which a vendor's backend may not implement. The Trainer's and Fabric's
strategies alike.

Lightning looks the strategy's methods up on the strategy object at every call, so the bridge
gives the run's strategy its own (:class:`OnStrategy`): no class of Lightning's changes, and only
strategies that run on an accelctl accelerator are touched.

- The Trainer calls :meth:`Accelerator.setup <lightning.pytorch.accelerators.Accelerator.setup>`
  at the start of every strategy's ``setup(trainer)``, before it wraps the model:
  :meth:`LightningAccelerator.setup <accelctl.integrations.lightning.LightningAccelerator.setup>`
  calls :func:`adapt`, which sets ``_setup_model`` and ``reduce``.
- Fabric calls no accelerator method before it wraps a model; the bridge's wrap of Fabric's
  ``_Connector._init_strategy`` (:mod:`.connector`) calls :func:`adapt_fabric` on the strategy
  it made, which sets ``setup_module`` and ``all_reduce``. Fabric's ``ddp_spawn`` launcher then
  pickles that strategy into its workers: an :class:`OnStrategy` pickles with it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Annotated, Any

import torch

# What the functions below are handed, untyped to mypy, declared as the framework's classes so
# that the names used of them are checked with the bridge's other uses (tests/bridgeuses.py).
_DDP = Annotated[
    Any, "lightning.pytorch.strategies:DDPStrategy", "lightning.fabric.strategies:DDPStrategy"
]
_Strategy = Annotated[
    Any,
    "lightning.pytorch.strategies:DDPStrategy",
    "lightning.pytorch.strategies:ModelParallelStrategy",
]
_FabricStrategy = Annotated[
    Any,
    "lightning.fabric.strategies:DDPStrategy",
    "lightning.fabric.strategies:ModelParallelStrategy",
]


def ddp_module(strategy: _DDP, original: Callable[[torch.nn.Module], Any], module: Any) -> Any:
    """Return ``module`` wrapped in DDP on the current stream where the device is not a CUDA GPU.

    Lightning makes a CUDA side stream for CUDA graph capture; DDP itself needs none. On CUDA,
    ``original(module)``, Lightning's own wrap."""
    device = strategy.root_device
    if device.type == "cuda":
        return original(module)
    from torch.nn.parallel import DistributedDataParallel

    device_ids = None if device.type == "cpu" else [device.index]
    return DistributedDataParallel(module=module, device_ids=device_ids, **strategy._ddp_kwargs)


def reduce_mean_as_sum(
    _strategy: Any,
    reduce: Callable[[Any, Any, Any], Any],
    tensor: Any,
    group: Any = None,
    reduce_op: Any = "mean",
) -> Any:
    """Return ``reduce(tensor, group, reduce_op)``, a ``"mean"`` as a sum divided by the world.

    The division is in place, as Lightning's own sum-then-divide for gloo: an integer stays an
    integer. ``_strategy`` is not read; it is there because :class:`OnStrategy` calls every
    adapted function alike, ``adapted(strategy, original, ...)``, and :func:`ddp_module` needs
    it.
    """
    if not (
        isinstance(tensor, torch.Tensor)
        and torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and _is_mean(reduce_op)
    ):
        return reduce(tensor, group, reduce_op)
    total = reduce(tensor, group, "sum")
    world = torch.distributed.get_world_size(group)
    return total.div_(world) if total.is_floating_point() else total.copy_(total / world)


def _is_mean(reduce_op: Any) -> bool:
    if isinstance(reduce_op, str):
        return reduce_op.lower() in ("mean", "avg")
    return bool(reduce_op == torch.distributed.ReduceOp.AVG)


class OnStrategy:
    """One of a strategy's methods, replaced on the strategy object; it pickles with it.

    Calling it runs ``adapted(strategy, original, *args, **kwargs)``, ``original`` being the
    function the strategy's class defines, bound to the strategy. It holds the strategy, the
    method's name, that function (pickled by its qualified name) and ``adapted``, a
    module-level function: nothing that pickle cannot name, so that Fabric's ``ddp_spawn``
    workers get the strategy with its adapted methods."""

    def __init__(self, strategy: Any, name: str, adapted: Callable[..., Any]) -> None:
        self.strategy, self.name, self.adapted = strategy, name, adapted
        self.original: Callable[..., Any] = getattr(type(strategy), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        original = MethodType(self.original, self.strategy)
        return self.adapted(self.strategy, original, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<accelctl's {self.adapted.__name__} on {type(self.strategy).__name__}.{self.name}>"


def adapt(strategy: _Strategy) -> None:
    """Give the Trainer's ``strategy`` its own DDP model wrap and mean reductions, once.

    On an accelctl accelerator: DDP's model wrap on the current stream and mean reductions as a
    sum divided by the world size, as the strategy object's own attributes (a strategy set up
    again keeps them). The model wrap is set where the strategy's ``_setup_model`` is
    ``DDPStrategy``'s own: a subclass that wraps the model its own way (``DeepSpeedStrategy``)
    keeps its way. The reduction is set on every ``DDPStrategy`` and ``ModelParallelStrategy``;
    a subclass's own ``reduce`` is what it calls.
    """
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    if not isinstance(strategy, (DDPStrategy, ModelParallelStrategy)):
        return
    if not isinstance(strategy.reduce, OnStrategy):
        strategy.reduce = OnStrategy(strategy, "reduce", reduce_mean_as_sum)  # type: ignore[method-assign]
    wraps_ddp = isinstance(strategy, DDPStrategy)
    if wraps_ddp and type(strategy)._setup_model is vars(DDPStrategy)["_setup_model"]:
        if not isinstance(strategy._setup_model, OnStrategy):
            strategy._setup_model = OnStrategy(strategy, "_setup_model", ddp_module)  # type: ignore[method-assign]


def adapt_fabric(strategy: _FabricStrategy) -> None:
    """Give Fabric's ``strategy`` its own DDP model wrap and mean reductions, once.

    Fabric's counterpart of :func:`adapt`, with its names: ``setup_module`` where it is
    ``DDPStrategy``'s own (Fabric's ``DeepSpeedStrategy`` keeps its engine), ``all_reduce`` on
    every ``DDPStrategy`` and ``ModelParallelStrategy``."""
    from lightning.fabric.strategies.ddp import DDPStrategy
    from lightning.fabric.strategies.model_parallel import ModelParallelStrategy

    if not isinstance(strategy, (DDPStrategy, ModelParallelStrategy)):
        return
    if not isinstance(strategy.all_reduce, OnStrategy):
        strategy.all_reduce = OnStrategy(strategy, "all_reduce", reduce_mean_as_sum)  # type: ignore[method-assign]
    wraps_ddp = isinstance(strategy, DDPStrategy)
    if wraps_ddp and type(strategy).setup_module is vars(DDPStrategy)["setup_module"]:
        if not isinstance(strategy.setup_module, OnStrategy):
            strategy.setup_module = OnStrategy(strategy, "setup_module", ddp_module)  # type: ignore[method-assign]

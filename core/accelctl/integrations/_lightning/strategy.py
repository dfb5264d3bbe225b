"""The Trainer's DDP model wrap and mean reductions, set on the run's strategy object.

Lightning's ``DDPStrategy`` assumes that a device that is not a CPU is a CUDA GPU with NCCL: it
wraps the model in DDP inside a new ``torch.cuda.Stream``, and ``DDPStrategy`` and
``ModelParallelStrategy`` reduce a ``"mean"`` with ``ReduceOp.AVG`` on every backend but gloo,
integer tensors included, which a vendor's backend may not implement.

Lightning calls :meth:`Accelerator.setup <lightning.pytorch.accelerators.Accelerator.setup>` at
the start of every strategy's ``setup(trainer)``, before it wraps the model, and looks the
strategy's methods up on the strategy object at every call. :meth:`LightningAccelerator.setup
<accelctl.integrations.lightning.LightningAccelerator.setup>` therefore calls :func:`adapt`,
which gives the run's strategy its own ``_setup_model`` and ``reduce``: no class of Lightning's
changes, and only strategies that run on an accelctl accelerator are touched.

Fabric calls no accelerator method before it wraps a model, so Fabric's ``DDPStrategy.
setup_module`` and the ``all_reduce`` of its ``DDPStrategy`` and ``ModelParallelStrategy`` stay
replaced on Lightning's classes (:mod:`.connector`), with the
same code: :func:`ddp_module` and :func:`reduce_mean_as_sum`.
"""

from __future__ import annotations

from collections.abc import Callable
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


def ddp_module(
    strategy: _DDP, module: torch.nn.Module, original: Callable[[torch.nn.Module], Any]
) -> Any:
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
    reduce: Callable[[Any, Any, Any], Any], tensor: Any, group: Any = None, reduce_op: Any = "mean"
) -> Any:
    """Return ``reduce(tensor, group, reduce_op)``, a ``"mean"`` as a sum divided by the world.

    The division is in place, as Lightning's own sum-then-divide for gloo: an integer stays an
    integer."""
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
    """One of the strategy's methods, replaced on the strategy object.

    ``adapted(original, *args)`` runs where ``original`` (the method the object had) ran."""

    def __init__(self, original: Callable[..., Any], adapted: Callable[..., Any]) -> None:
        self.original, self.adapted = original, adapted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.adapted(self.original, *args, **kwargs)


def adapt(strategy: _Strategy) -> None:
    """Give the Trainer's ``strategy`` its own DDP model wrap and mean reductions, once.

    On an accelctl accelerator: DDP's model wrap on the current stream and mean reductions as a
    sum divided by the world size, as the strategy object's own attributes (a strategy set up
    again keeps them). The model wrap is set where the strategy's ``_setup_model`` is
    ``DDPStrategy``'s own: a subclass that wraps the model its own way (``DeepSpeedStrategy``)
    keeps its way. The reduction is set on every ``DDPStrategy`` and ``ModelParallelStrategy``.
    """
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    if not isinstance(strategy, (DDPStrategy, ModelParallelStrategy)):
        return
    if not isinstance(strategy.reduce, OnStrategy):
        strategy.reduce = OnStrategy(strategy.reduce, reduce_mean_as_sum)  # type: ignore[method-assign]
    wraps_ddp = isinstance(strategy, DDPStrategy)
    if wraps_ddp and type(strategy)._setup_model is vars(DDPStrategy)["_setup_model"]:
        if not isinstance(strategy._setup_model, OnStrategy):

            def setup_model(original: Callable[..., Any], model: torch.nn.Module) -> Any:
                return ddp_module(strategy, model, original)

            strategy._setup_model = OnStrategy(  # type: ignore[method-assign]
                strategy._setup_model, setup_model
            )

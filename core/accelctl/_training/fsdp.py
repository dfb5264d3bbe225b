"""``Trainer(strategy="fsdp")``: whether the device can run FSDP2, and the model sharded by it.

FSDP2 (``torch.distributed.fsdp.fully_shard``) is device-generic, but it asks things of a device
that not every device has (:data:`accelctl.capabilities.FSDP_NEEDS`): those that can be known
without a process group are checked (:func:`refuse_fsdp_gaps`) when a Trainer of several devices
is made in a process started alone (which is only told to launch: nothing is launched for
nothing), else when ``fit`` has set the device up, before it joins the group. A device that lacks
them is refused, naming what it lacks: never a stack trace from inside FSDP.

The wrapping (docs/training.md, "Sharded training (FSDP2)"): each unit of
:func:`sharding_units` gets its own ``fully_shard`` (its parameters gathered for its forward and
backward and freed after), then the root, which takes the parameters no unit holds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .._base.text import clean
from .._contract.errors import ProcessSetupError, TrainerError
from ..capabilities import Capability, fsdp_gaps

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .precision import Precision


def refuse_fsdp_without_backend(accelerator: str, backend: str | None) -> None:
    """Refuse FSDP2 on an accelerator without a ``distributed_backend`` (it touches no device).

    :raises ProcessSetupError: saying so, and what to do instead.
    """
    if backend is None:
        raise ProcessSetupError(
            f"strategy='fsdp' on {accelerator!r} needs a torch.distributed backend (FSDP2 "
            f"shards over a process group, even of one process), and its distributed_backend "
            f"is None; train with strategy='auto'"
        )


def refuse_fsdp_gaps(accelerator: str, device_type: str, backend: str | None) -> None:
    """Refuse FSDP2 where ``accelerator``'s device or backend lacks what it needs.

    Probes the current device of ``device_type`` (it starts the device's runtime in this
    process).

    :raises ProcessSetupError: naming each missing capability with the device's own words, and
        what to do instead.
    """
    refuse_fsdp_without_backend(accelerator, backend)
    assert backend is not None
    gaps = _fsdp_gaps(device_type, backend)
    if gaps:
        named = [f"{gap.name} ({clean(gap.reason).rstrip('.')})" for gap in gaps]
        lacking = " and ".join([", ".join(named[:-1]), named[-1]] if named[1:] else named)
        # The device type where it is not the accelerator's name (a vendor's instance).
        kind = f"device type {device_type!r}, " if device_type != accelerator else ""
        raise ProcessSetupError(
            f"strategy='fsdp' cannot run on {accelerator!r} ({kind}"
            f"backend {backend!r}): it lacks what FSDP2 needs: {lacking}. Train with "
            f"strategy='ddp' (or 'auto'); `accelctl validate --capabilities {accelerator}` "
            f"shows what the device can do"
        )


@functools.cache
def _fsdp_gaps(device_type: str, backend: str) -> tuple[Capability, ...]:
    """:func:`accelctl.capabilities.fsdp_gaps`, once per process (every Trainer asks it)."""
    return fsdp_gaps(device_type, backend)


def sharding_units(model: nn.Module) -> list[nn.Module]:
    """The submodules that get a ``fully_shard`` of their own, children before their parents.

    ``model.fsdp_modules()``, where the model defines it (its transformer blocks, say); else each
    direct child that holds parameters, where a ``ModuleList`` or ``ModuleDict`` (a container
    without a forward of its own) stands for its items.

    :raises TrainerError: when ``fsdp_modules`` returns something that is not a submodule.
    """
    chosen = getattr(model, "fsdp_modules", None)
    if not callable(chosen):
        return list(_children_with_parameters(model))
    units = list(chosen())
    order = {id(module): index for index, module in enumerate(reversed(list(model.modules())))}
    strays = [unit for unit in units if id(unit) not in order or unit is model]
    if strays:
        raise TrainerError(
            f"{type(model).__name__}.fsdp_modules() must return submodules of the model (the "
            f"model itself is sharded last, by the Trainer); it returned "
            f"{', '.join(type(unit).__name__ for unit in strays)}"
        )
    return sorted(units, key=lambda unit: order[id(unit)])  # fully_shard goes bottom-up


def _children_with_parameters(module: nn.Module) -> Iterator[nn.Module]:
    from torch import nn

    for child in module.children():
        if isinstance(child, nn.ModuleList | nn.ModuleDict):
            yield from _children_with_parameters(child)
        elif any(True for _ in child.parameters()):
            yield child


def mixed_precision_policy(precision: Precision) -> Any:
    """Return FSDP2's ``MixedPrecisionPolicy`` for the Trainer's ``precision``.

    Parameters gathered in bfloat16 / float16 for the mixed settings, gradients reduced in float32
    (the sharded parameters and the optimizer stay float32)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if not precision.mixed:
        return MixedPrecisionPolicy()
    dtype = torch.bfloat16 if precision.name == "bf16-mixed" else torch.float16
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def sharded_grad_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler | None:
    """Return float16's gradient scaler, sharding-aware.

    Whether a step overflowed is agreed by all processes, so that all skip it together (each holds
    only a shard of the gradients)."""
    if precision.name != "16-mixed":
        return None
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device=device.type)


def shard_model(model: nn.Module, device: torch.device, precision: Precision) -> None:
    """Shard ``model`` in place over the default process group with FSDP2.

    On a 1-D ``DeviceMesh`` of ``device``'s type: rank 0's initial weights (as under DDP), then
    ``fully_shard`` on each unit of :func:`sharding_units` and on the root. ``training_step`` and
    ``validation_step`` are registered as forward methods, so that FSDP2 gathers the root's
    parameters for them.

    :raises TrainerError: for a model sharded already (by an earlier fit, or by its author).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

    if isinstance(model, FSDPModule):
        raise TrainerError(
            f"{type(model).__name__} is sharded already (fully_shard, by an earlier fit or by "
            f"you): strategy='fsdp' shards a plain model; make a fresh one and load its weights "
            f"(fit(..., ckpt_path=...) reads a sharded checkpoint into any model)"
        )
    model.to(device)
    world = dist.get_world_size()
    if world > 1:  # fully_shard keeps each process's own chunk: start from one set of weights
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor, src=0)
    mesh = init_device_mesh(device.type, (world,))
    policy = mixed_precision_policy(precision)
    for unit in sharding_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for method in ("training_step", "validation_step"):
        if callable(getattr(model, method, None)):
            register_fsdp_forward_method(model, method)


def in_lockstep(
    batches: Iterable[Any], forward: Callable[[Any], object], device: torch.device
) -> Iterator[Any]:
    """Yield ``batches`` for validation under FSDP2 with the processes in lockstep.

    With several processes every forward is a collective (each unit gathers its parameters): the
    processes agree before each batch whether any has one left, and one whose shard has run out runs
    ``forward`` on its last batch again while the others finish, its figures dropped (a validation
    shard may be a batch shorter).

    :raises TrainerError: for a process whose shard has no batch at all while another has.
    """
    import torch
    import torch.distributed as dist

    iterator, last, end = iter(batches), None, object()
    while True:
        batch = next(iterator, end)
        more = torch.tensor([int(batch is not end)], device=device)
        dist.all_reduce(more, op=dist.ReduceOp.MAX)
        if not more.item():
            return
        if batch is not end:
            last = batch
            yield batch
        elif last is None:
            raise TrainerError(
                f"with strategy='fsdp' every process runs each validation forward, and process "
                f"{dist.get_rank()} has no validation batch while another has: give the "
                f"validation loader at least one batch per process"
            )
        else:
            forward(last)  # the forward the others run now; its figures are dropped

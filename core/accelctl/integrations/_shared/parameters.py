"""Moving a model to a device without leaving an optimizer behind (both bridges use it).

``module.to(device)`` keeps each ``Parameter`` object, and so the optimizer's references to it,
only where the device's tensors can take the CPU tensor's place in it (the same C++ tensor type:
CUDA, MPS). An out-of-tree device's tensors often cannot (openreg's, XLA's): torch then makes new
``Parameter`` objects, and an optimizer made before the move, as Accelerate's ``prepare(model,
optimizer)`` and Fabric's ``setup(model, optimizer)`` expect, steps the old CPU tensors while the
model trains nothing, silently. Both frameworks mend this for XLA only. Inside
:func:`keeping_parameters` torch swaps the moved data into the existing objects instead
(``torch.__future__.set_swap_module_params_on_conversion``, torch's own switch for this).

FSDP2 meets the same wall: ``fully_shard`` moves a CPU model's tensors to its mesh's device with
``tensor.data = tensor.to(device)``, which raises there ("variable and tensor have incompatible
tensor type"). :func:`move_before_sharding` moves the model first, keeping its parameters.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def replaces_parameters(device: torch.device) -> bool:
    """True when ``module.to(device)`` would replace the ``Parameter`` objects of a CPU model."""
    import torch

    if device.type == "cpu":
        return False
    compatible = getattr(torch, "_has_compatible_shallow_copy_type", None)
    if compatible is None:  # pragma: no cover - a torch without it: swap, which is always right
        return True
    return not compatible(torch.empty(0), torch.empty(0, device=device))


@contextlib.contextmanager
def keeping_parameters(device: torch.device) -> Iterator[None]:
    """Inside this block, moving a model to ``device`` keeps its ``Parameter`` objects."""
    import torch

    if not replaces_parameters(device):
        yield
        return
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


def move_before_sharding(module: torch.nn.Module, device: torch.device) -> None:
    """Move ``module`` to ``device``, keeping its ``Parameter`` objects, where FSDP2 cannot.

    FSDP2's ``fully_shard`` cannot where :func:`replaces_parameters` says so. Elsewhere, and
    for a model with tensors on the meta device (initialisation deferred to after sharding),
    leave it where it is, as ``fully_shard`` expects."""
    if not replaces_parameters(device):
        return
    tensors = itertools.chain(module.parameters(), module.buffers())
    if any(tensor.device.type == "meta" for tensor in tensors):
        return
    with keeping_parameters(device):
        module.to(device)

"""``deepspeed.initialize`` with the model moved to the plugin's device first, keeping its
``Parameter`` objects (``_parameters``).

DeepSpeed's engine names the model's parameters (and, from 0.17 or so, holds a weak reference
to each) before it moves the model with ``module.to(device)``. On a device whose tensors cannot
take a CPU tensor's place in a ``Parameter`` (openreg's, XLA's), that move makes new
``Parameter`` objects: the engine then looks up names it no longer finds (``KeyError`` in ZeRO's
optimizer) and a client optimizer made before ``initialize`` would step the old CPU tensors;
torch's own switch that swaps instead refuses a tensor with a weak reference. Moved before the
engine sees it, the model keeps its parameters and the engine's own move does nothing. On the
CPU, CUDA or any device whose tensors fit, nothing is wrapped.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ._parameters import move_before_sharding, replaces_parameters
from ._versions import Internal

#: What is wrapped: DeepSpeed's entry point, taking the model as its second parameter.
INTERNAL = Internal("deepspeed", "initialize", ("args", "model"))

#: DeepSpeed's own ``initialize``, while it is wrapped.
_original: Any = None


def wrap(device: torch.device) -> bool:
    """Wrap ``deepspeed.initialize`` for ``device`` where its tensors replace parameters;
    True when wrapped."""
    import deepspeed

    global _original
    restore()
    if not replaces_parameters(device):
        return False
    original = deepspeed.initialize

    @functools.wraps(original)
    def initialize(*args: Any, **kwargs: Any) -> Any:
        model = kwargs.get("model", args[1] if len(args) > 1 else None)
        if isinstance(model, torch.nn.Module) and any(
            p.device.type == "cpu" for p in model.parameters()
        ):
            move_before_sharding(model, device)
        return original(*args, **kwargs)

    _original = original
    deepspeed.initialize = initialize
    return True


def restore() -> None:
    """DeepSpeed's own ``initialize`` again."""
    import deepspeed

    global _original
    if _original is not None:
        deepspeed.initialize = _original
        _original = None

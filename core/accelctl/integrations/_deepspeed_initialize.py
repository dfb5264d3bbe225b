"""``deepspeed.initialize`` on a device that is not the CPU: the model moved to the plugin's
device first, keeping its ``Parameter`` objects (``_parameters``), and a ZeRO-3 run refused
before it starts where the DeepSpeed release would compute in float64 on a device without it.

DeepSpeed's engine names the model's parameters (and, from 0.17 or so, holds a weak reference
to each) before it moves the model with ``module.to(device)``. On a device whose tensors cannot
take a CPU tensor's place in a ``Parameter`` (openreg's, XLA's), that move makes new
``Parameter`` objects: the engine then looks up names it no longer finds (``KeyError`` in ZeRO's
optimizer) and a client optimizer made before ``initialize`` would step the old CPU tensors;
torch's own switch that swaps instead refuses a tensor with a weak reference. Moved before the
engine sees it, the model keeps its parameters and the engine's own move does nothing.

DeepSpeed before 0.19.6 computes ZeRO-3's gradient norms in float64 whatever the accelerator's
``is_fp64_supported()`` says (0.19.6 keeps them in float32 there, as on MPS); on a device
without float64 kernels (torch_openreg's ``abs``) the first step would fail deep in ZeRO-3.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import accelctl

from ._parameters import move_before_sharding, replaces_parameters
from ._versions import Internal

if TYPE_CHECKING:
    from ._deepspeed_accelerator import PluginAccelerator

#: What is wrapped: DeepSpeed's entry point, taking the model as its second parameter.
INTERNAL = Internal("deepspeed", "initialize", ("args", "model"))
#: The first release whose ZeRO-3 norms follow ``is_fp64_supported()``.
NORMS_FOLLOW_DEVICE = "0.19.6"

#: DeepSpeed's own ``initialize``, while it is wrapped.
_original: Any = None


def wrap(accelerator: PluginAccelerator) -> bool:
    """Wrap ``deepspeed.initialize`` for ``accelerator``'s device, unless it is a CPU; True
    when wrapped."""
    import deepspeed

    global _original
    restore()
    device = accelerator.process_device
    if device.type == "cpu":
        return False
    original = deepspeed.initialize
    moves = replaces_parameters(device)

    @functools.wraps(original)
    def initialize(*args: Any, **kwargs: Any) -> Any:
        refuse_float64_norms(accelerator, _zero_stage(args, kwargs))
        model = kwargs.get("model", args[1] if len(args) > 1 else None)
        if (
            moves
            and isinstance(model, torch.nn.Module)
            and any(p.device.type == "cpu" for p in model.parameters())
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


def norms_follow_device() -> bool:
    """Whether the installed DeepSpeed keeps ZeRO-3's norms out of float64 where the device
    has none (its ``deepspeed.runtime.zero.utils.get_norm_dtype``, from 0.19.6)."""
    if importlib.util.find_spec("deepspeed.runtime.zero.utils") is None:
        return False
    from deepspeed.runtime.zero import utils

    return hasattr(utils, "get_norm_dtype")


def refuse_float64_norms(accelerator: PluginAccelerator, stage: int | None) -> None:
    """Refuse ZeRO-3 on a device without float64 where DeepSpeed would compute its gradient
    norms in float64 anyway.

    :raises accelctl.ProcessSetupError: naming the device, the release, and the way out.
    """
    if stage != 3 or accelerator.is_fp64_supported() or norms_follow_device():
        return
    import deepspeed

    from accelctl._selection import known_name

    raise accelctl.ProcessSetupError(
        f"ZeRO stage 3 on accelctl accelerator {known_name(accelerator.handle)!r} "
        f"({accelerator.process_device}): DeepSpeed {deepspeed.__version__} computes ZeRO-3's "
        f"gradient norms in float64, which the device does not run (norm, abs, isinf on "
        f"float64); DeepSpeed {NORMS_FOLLOW_DEVICE} and later keep them in float32 there. "
        f"pip install 'deepspeed>={NORMS_FOLLOW_DEVICE}', or use ZeRO stage 1 or 2"
    )


def _zero_stage(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The ZeRO stage a call of ``deepspeed.initialize`` asks for (its ``config``,
    ``config_params`` or ``args.deepspeed_config``, a dict or a JSON file); None where none is
    read."""
    first = args[0] if args else kwargs.get("args")
    config = kwargs.get("config") or kwargs.get("config_params")
    config = config or getattr(first, "deepspeed_config", None)
    if isinstance(config, (str, Path)):
        try:
            config = json.loads(Path(config).read_text())
        except (OSError, ValueError):
            return None  # DeepSpeed says what is wrong with it
    if not isinstance(config, dict):
        return None
    stage = (config.get("zero_optimization") or {}).get("stage")
    return stage if isinstance(stage, int) else None

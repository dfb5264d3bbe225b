"""``deepspeed.initialize`` on a device that is not the CPU.

The model moved to the plugin's device first, keeping its ``Parameter`` objects (``_parameters``),
and a ZeRO-3 run refused before it starts where the DeepSpeed release would compute in float64 on a
device without it.

DeepSpeed's engine names the model's parameters (and, from 0.17 or so, holds a weak reference
to each) before it moves the model with ``module.to(device)``. On a device whose tensors cannot
take a CPU tensor's place in a ``Parameter`` (openreg's, XLA's), that move makes new
``Parameter`` objects: the engine then looks up names it no longer finds (``KeyError`` in ZeRO's
optimizer) and a client optimizer made before ``initialize`` would step the old CPU tensors;
torch's own switch that swaps instead refuses a tensor with a weak reference. Moved before the
engine sees it, the model keeps its parameters and the engine's own move does nothing.

A kernel the device lacks, met in the engine's ``forward``, ``backward`` or ``step``, becomes
:class:`accelctl.MissingKernelError` (:func:`translate_kernel_errors`), as on the other bridges'
training paths.

DeepSpeed before 0.19.6 computes ZeRO-3's gradient norms in float64 whatever the accelerator's
``is_fp64_supported()`` says (0.19.6 keeps them in float32 there, as on MPS); on a device
without float64 kernels (torch_openreg's ``abs``) the first step would fail deep in ZeRO-3.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import accelctl
from accelctl._deepspeed.refusals import (
    float64_norms_refusal,
    offload_device,
    offload_refusal,
    offload_where,
    zero_stage,
)

from .._shared.parameters import move_before_sharding, replaces_parameters
from .adaptation import INITIALIZE, PATCHES

if TYPE_CHECKING:
    from .accelerator import PluginAccelerator

#: What is wrapped: DeepSpeed's entry point, taking the model as its second parameter.
INTERNAL = INITIALIZE


def wrap(accelerator: PluginAccelerator) -> bool:
    """Wrap ``deepspeed.initialize`` for ``accelerator``'s device, unless it is a CPU.

    True when wrapped. It goes through the bridge's patches
    (``integrations/_shared/patching.py``); a wrap for an earlier accelerator is undone first.
    """
    restore()
    device = accelerator.process_device
    if device.type == "cpu":
        return False
    moves = replaces_parameters(device)

    def wrap_initialize(original: Any) -> Any:
        @functools.wraps(original)
        def initialize(*args: Any, **kwargs: Any) -> Any:
            config = _config(args, kwargs)
            refuse_float64_norms(accelerator, zero_stage(config))
            refuse_offload(
                accelerator, config, kwargs.get("optimizer", args[2] if len(args) > 2 else None)
            )
            model = kwargs.get("model", args[1] if len(args) > 1 else None)
            if (
                moves
                and isinstance(model, torch.nn.Module)
                and any(p.device.type == "cpu" for p in model.parameters())
            ):
                move_before_sharding(model, device)
            made = original(*args, **kwargs)
            translate_kernel_errors(made[0], accelerator)
            return made

        return initialize

    PATCHES.apply(
        INTERNAL.owner,
        INTERNAL.name,
        wrap_initialize,
        "the model moved to the plugin's device keeping its parameters; set-ups that cannot "
        "run refused; missing kernels raised as accelctl.MissingKernelError",
    )
    return True


#: The engine's methods that run the model's kernels (``engine(x)`` calls ``forward``).
_RUNNING = ("forward", "backward", "step")


def translate_kernel_errors(engine: Any, accelerator: PluginAccelerator) -> None:
    """Make a kernel the device lacks in ``engine`` raise :class:`accelctl.MissingKernelError`.

    This wraps ``engine``'s ``forward``, ``backward`` and ``step``. The error names the kernel
    (the layer too, in the forward) and is shown as accelctl's one line should it end the
    program; other errors pass unchanged, and nothing is asked of an error until one stopped
    the call.
    """
    from accelctl._kernels.translate import raise_missing_kernel

    name = accelerator.handle.plugin_name
    device = accelerator.process_device
    model = getattr(engine, "module", None)
    for method in _RUNNING:
        bound = getattr(engine, method, None)
        if bound is None or getattr(bound, "_accelctl_translated", False):
            continue

        def translated(*args: Any, _bound: Any = bound, **kwargs: Any) -> Any:
            try:
                return _bound(*args, **kwargs)
            except Exception as exc:
                raise_missing_kernel(exc, accelerator=name, device=device, model=model)
                raise

        functools.update_wrapper(translated, bound)
        translated._accelctl_translated = True  # type: ignore[attr-defined]
        setattr(engine, method, translated)


def restore() -> None:
    """DeepSpeed's own ``initialize`` again."""
    PATCHES.undo(INTERNAL.name)


def refuse_float64_norms(accelerator: PluginAccelerator, stage: int | None) -> None:
    """Refuse ZeRO-3 where DeepSpeed would compute norms in float64 on a device without it.

    The norms are the gradients'; the rule is
    :func:`accelctl._deepspeed.refusals.float64_norms_refusal`, which ``accelctl launch``
    applies too.

    :raises accelctl.ProcessSetupError: naming the device, the release, and the way out.
    """
    from accelctl._choice.selection import known_name

    problem = float64_norms_refusal(
        stage, known_name(accelerator.handle), accelerator.process_device,
        accelerator.is_fp64_supported,
    )  # fmt: skip
    if problem is not None:
        raise accelctl.ProcessSetupError(problem)


def refuse_offload(
    accelerator: PluginAccelerator, config: dict[str, Any] | None, optimizer: Any
) -> None:
    """Refuse a ZeRO-Offload set-up that cannot run, before DeepSpeed makes its process group.

    A DeepSpeed optimizer (``"optimizer": {"type": "Adam"}``, ...) steps with DeepSpeed's CPU op,
    which on a plugin's device is compiled on first use, on a machine without what that takes
    (:func:`accelctl._deepspeed.refusals.offload_refusal`, which ``accelctl launch`` applies too); a
    torch optimizer needs ``"zero_force_ds_cpu_optimizer": false`` (DeepSpeed refuses it otherwise,
    in its engine).

    :raises accelctl.ProcessSetupError: naming what is missing and the ways out.
    """
    if config is None or offload_device(config) is None:
        return
    from accelctl._choice.selection import known_name

    name, device = known_name(accelerator.handle), accelerator.process_device
    if isinstance(optimizer, torch.optim.Optimizer):
        forced = config.get("zero_force_ds_cpu_optimizer", True) is not False
        if forced and not type(optimizer).__module__.startswith("deepspeed."):  # not CPUAdam
            raise accelctl.ProcessSetupError(
                f"{offload_where(config, name, device)} with a torch optimizer "
                f"({type(optimizer).__name__}): DeepSpeed refuses it unless the config sets "
                '"zero_force_ds_cpu_optimizer": false (the torch optimizer then steps on the '
                "CPU); set it, or leave offload_optimizer out"
            )
        return
    if optimizer is not None:  # a callable making one
        return
    problem = offload_refusal(config, name, device)
    if problem is not None:
        raise accelctl.ProcessSetupError(problem)


def _config(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Return the config a call of ``deepspeed.initialize`` passes, or None.

    It is read from ``config``, ``config_params`` or ``args.deepspeed_config``, a dict or a
    JSON file; None where none is read.
    """
    first = args[0] if args else kwargs.get("args")
    config = kwargs.get("config") or kwargs.get("config_params")
    config = config or getattr(first, "deepspeed_config", None)
    if isinstance(config, (str, Path)):
        try:
            config = json.loads(Path(config).read_text())
        except (OSError, ValueError):
            return None  # DeepSpeed says what is wrong with it
    return config if isinstance(config, dict) else None

"""What the DeepSpeed bridge adapts and uses of DeepSpeed, checked at import.

What the DeepSpeed bridge adapts besides ``set_accelerator``, every name it uses of DeepSpeed
(``_uses.py``), and the releases it is tested with: checked once, when the bridge is imported."""

from __future__ import annotations

from .._shared.patching import Patches
from .._shared.uses import USES
from .._shared.versions import DEEPSPEED, Adaptation, Internal

#: ``deepspeed.initialize``, wrapped off the CPU (:func:`._deepspeed_initialize.wrap`).
INITIALIZE = Internal("deepspeed", "initialize", ("args", "model"))
#: The builder names ``import deepspeed`` binds, pointed at the accelerator's builders
#: (:func:`._deepspeed_ops.rebind`).
BUILDER_NAMES = (
    Internal("deepspeed.ops.op_builder", "builder_closure", ("member_name",)),
    Internal("deepspeed.ops.adam.fused_adam", "FusedAdamBuilder"),
    Internal("deepspeed.ops.adam.cpu_adam", "CPUAdamBuilder"),
    Internal("deepspeed.ops.lamb.fused_lamb", "FusedLambBuilder"),
    Internal("deepspeed.ops.lion.fused_lion", "FusedLionBuilder"),
    Internal("deepspeed.ops.lion.cpu_lion", "CPULionBuilder"),
    Internal("deepspeed.ops.adagrad.cpu_adagrad", "CPUAdagradBuilder"),
)

ADAPTATION = Adaptation("deepspeed", DEEPSPEED, (INITIALIZE, *BUILDER_NAMES), USES["deepspeed"])

#: What the bridge replaced of DeepSpeed: ``deepspeed.initialize`` and the builder names
#: (:func:`._deepspeed_initialize.wrap`, :func:`._deepspeed_ops.rebind`).
PATCHES = Patches(ADAPTATION)

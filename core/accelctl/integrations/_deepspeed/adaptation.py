"""What the DeepSpeed bridge adapts and uses of DeepSpeed, checked at import.

Besides ``set_accelerator``: the internals it adapts, every name it uses of DeepSpeed
(``_shared/uses.py``) and the releases it is tested with, checked once when it is imported."""

from __future__ import annotations

from .._shared.patching import Patches
from .._shared.uses import USES
from .._shared.versions import DEEPSPEED, Adaptation, Internal

#: ``deepspeed.initialize``, wrapped off the CPU (:func:`.initialize.wrap`).
INITIALIZE = Internal("deepspeed", "initialize", ("args", "model"))
#: The builder names ``import deepspeed`` binds, pointed at the accelerator's builders
#: (:func:`.ops.rebind`).
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
#: (:func:`.initialize.wrap`, :func:`.ops.rebind`).
PATCHES = Patches(ADAPTATION)

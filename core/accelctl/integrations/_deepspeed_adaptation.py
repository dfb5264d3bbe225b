"""What the DeepSpeed bridge adapts besides ``set_accelerator``, every name it uses of DeepSpeed
(``_uses.py``), and the releases it is tested with: checked once, when the bridge is imported."""

from __future__ import annotations

from . import _deepspeed_initialize, _deepspeed_ops
from ._patching import Patches
from ._uses import USES
from ._versions import DEEPSPEED, Adaptation

ADAPTATION = Adaptation(
    "deepspeed",
    DEEPSPEED,
    (_deepspeed_initialize.INTERNAL, *_deepspeed_ops.INTERNALS),
    USES["deepspeed"],
)

#: What the bridge replaced of DeepSpeed: ``deepspeed.initialize`` and the builder names
#: (:func:`._deepspeed_initialize.wrap`, :func:`._deepspeed_ops.rebind`).
PATCHES = Patches(ADAPTATION)

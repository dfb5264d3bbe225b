"""What the Ray bridge extends of Ray Train, and every name of Ray its code uses.

Checked when :mod:`accelctl.integrations.ray` is imported, before anything of Ray is
(``accelctl.integrations._shared.versions``)."""

from __future__ import annotations

from .._shared.uses import USES
from .._shared.versions import RAY, Adaptation, Internal

#: What the bridge extends: Ray Train's private torch backend (its ``on_start``, called with
#: the parameters below) and the two properties of ``TorchConfig`` that name it and the training
#: function's context; every name the bridge's code uses; and the releases tested.
ADAPTATION = Adaptation(
    "ray",
    RAY,
    (
        Internal("ray.train.torch.config:_TorchBackend", "on_start",
                 ("self", "worker_group", "backend_config")),
        Internal("ray.train.torch:TorchConfig", "backend_cls"),
        Internal("ray.train.torch:TorchConfig", "train_func_context"),
    ),
    USES["ray"],
)  # fmt: skip

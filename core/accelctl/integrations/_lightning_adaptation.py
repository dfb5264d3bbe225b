"""What the Lightning bridge adapts of Lightning, and every name of Lightning its code uses:
checked when :mod:`accelctl.integrations.lightning` is imported, before torch or anything of
Lightning is (``accelctl.integrations._versions``); the adaptation itself is
:mod:`accelctl.integrations._lightning_connector`'s."""

from __future__ import annotations

from ._uses import USES
from ._versions import LIGHTNING, Adaptation, Internal

_TRAINER_CONNECTOR = (
    "lightning.pytorch.trainer.connectors.accelerator_connector:_AcceleratorConnector"
)
_FABRIC_CONNECTOR = "lightning.fabric.connector:_Connector"
_CONNECTOR_METHODS = (
    "_choose_strategy",
    "_check_strategy_and_fallback",
    "_init_strategy",
    "_check_and_init_precision",
)
_REDUCE = ("self", "tensor", "group", "reduce_op")

#: Every method :func:`install` wraps, with the parameters its wrapper passes on, the one private
#: name it imports, and the releases tested.
ADAPTATION = Adaptation(
    "lightning",
    LIGHTNING,
    (
        *(Internal(_TRAINER_CONNECTOR, name, ("self",)) for name in _CONNECTOR_METHODS),
        *(Internal(_FABRIC_CONNECTOR, name, ("self",)) for name in _CONNECTOR_METHODS),
        Internal("lightning.pytorch.strategies:DDPStrategy", "_setup_model", ("self", "model")),
        Internal("lightning.fabric.strategies:DDPStrategy", "setup_module", ("self", "module")),
        Internal("lightning.pytorch.strategies:DDPStrategy", "reduce", _REDUCE),
        Internal("lightning.fabric.strategies:DDPStrategy", "all_reduce", _REDUCE),
        Internal("lightning.pytorch.strategies:ModelParallelStrategy", "reduce", _REDUCE),
        Internal("lightning.fabric.strategies:ModelParallelStrategy", "all_reduce", _REDUCE),
        Internal(
            "lightning.pytorch.strategies:ModelParallelStrategy", "_setup_distributed", ("self",)
        ),
        Internal(
            "lightning.fabric.strategies:ModelParallelStrategy", "_setup_distributed", ("self",)
        ),
        Internal("lightning.pytorch.strategies:DeepSpeedStrategy", "setup_environment", ("self",)),
        Internal("lightning.fabric:Fabric", "setup", ("self",)),
        Internal("lightning.fabric:Fabric", "setup_module", ("self",)),
        Internal("lightning.fabric.strategies.fsdp", "_FSDP_ALIASES"),
    ),
    USES["lightning"],
)

"""What the Lightning bridge adapts of Lightning, and every name of Lightning its code uses.

Checked when :mod:`accelctl.integrations.lightning` is imported, before torch or anything of
Lightning is (``accelctl.integrations._shared.versions``); the adaptation itself is
:mod:`.connector`'s."""

from __future__ import annotations

from .._shared.uses import USES
from .._shared.versions import LIGHTNING, Adaptation, Internal

#: The owners of what the bridge patches, as its
#: :class:`~accelctl.integrations._shared.versions.Internal`\ s name them.
TRAINER_CONNECTOR = (
    "lightning.pytorch.trainer.connectors.accelerator_connector:_AcceleratorConnector"
)
FABRIC_CONNECTOR = "lightning.fabric.connector:_Connector"
TRAINER_SHARDED = "lightning.pytorch.strategies:ModelParallelStrategy"
FABRIC_SHARDED = "lightning.fabric.strategies:ModelParallelStrategy"
TRAINER_DEEPSPEED = "lightning.pytorch.strategies:DeepSpeedStrategy"
FABRIC = "lightning.fabric:Fabric"
_CONNECTOR_METHODS = (
    "_choose_strategy",
    "_check_strategy_and_fallback",
    "_init_strategy",
    "_check_and_init_precision",
)

#: Every method :func:`install` wraps, with the parameters its wrapper passes on, the one private
#: name it imports, and the releases tested.
ADAPTATION = Adaptation(
    "lightning",
    LIGHTNING,
    (
        *(Internal(TRAINER_CONNECTOR, name, ("self",)) for name in _CONNECTOR_METHODS),
        *(Internal(FABRIC_CONNECTOR, name, ("self",)) for name in _CONNECTOR_METHODS),
        Internal(TRAINER_SHARDED, "_setup_distributed", ("self",)),
        Internal(FABRIC_SHARDED, "_setup_distributed", ("self",)),
        Internal(TRAINER_DEEPSPEED, "setup_environment", ("self",)),
        Internal(FABRIC, "setup", ("self",)),
        Internal(FABRIC, "setup_module", ("self",)),
        Internal("lightning.fabric.strategies.fsdp", "_FSDP_ALIASES"),
    ),
    USES["lightning"],
)

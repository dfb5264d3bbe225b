"""Lightning's ModelParallelStrategy (FSDP2) through the accelctl bridge.

``python fsdp_lightning_run.py OUT ACCELERATOR``.

Started once: Lightning's own launcher starts the second process (this script again). Each
process writes ``OUT/rank<r>.json`` (what ran where, how the parameters were held) and
``OUT/rank<r>.pt`` (the full weights, gathered).
"""

import sys
from pathlib import Path

import lightning
import torch
from fsdp_shared import EPOCHS, LEARNING_RATE, full_weights, loader, make_net, sharding, write
from lightning.pytorch.strategies import ModelParallelStrategy
from scriptend import exit_without_teardown
from tinymodel import quiet_trainer_options
from torch.distributed.fsdp import fully_shard

from accelctl.integrations.lightning import LightningAccelerator

OUT, ACCELERATOR = Path(sys.argv[1]), sys.argv[2]


class Sharded(lightning.LightningModule):
    """``make_net()`` sharded with ``fully_shard`` over the data-parallel mesh."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.losses: list[float] = []
        self.seen: list[list[int]] = []

    def configure_model(self) -> None:
        fully_shard(self.net, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch, batch_idx):
        ids, x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, sync_dist=True)
        self.losses.append(float(loss.detach()))
        self.seen.append(ids.tolist())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


trainer = lightning.Trainer(
    accelerator=LightningAccelerator(ACCELERATOR),
    devices=2,
    strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
    max_epochs=EPOCHS,
    **quiet_trainer_options(),
)
module = Sharded()
trainer.fit(module, loader())
report = {
    "rank": trainer.global_rank,
    "world_size": trainer.world_size,
    "backend": trainer.strategy.process_group_backend,
    "root_device": str(trainer.strategy.root_device),
    "logged_loss": float(trainer.callback_metrics["loss"]),
    "losses": module.losses,
    "seen": module.seen,
    **sharding(module.net),
}
write(OUT, trainer.global_rank, report, full_weights(module.net))
exit_without_teardown()

"""A Lightning script whose model needs a kernel openreg lacks (its convolution).

For the tests of missing kernels: ``python lightning_kernels_run.py OUT ACCELERATOR DEVICES``.

ACCELERATOR ``openreg`` (through the bridge) or ``cpu`` (Lightning's own); DEVICES ``1``, or
``2`` for Lightning's own DDP (or under ``accelctl launch``). The model has no norm layer (torch
decomposes those on openreg, a ulp off the CPU's), so that a fit whose convolution runs on the
CPU (``ACCELCTL_CPU_FALLBACK=1``) ends with the CPU fit's weights exactly. Rank 0 writes its
final weights to ``OUT/weights.pt``; a fit stopped by an error ends the script on it.
"""

import sys
from pathlib import Path

import lightning
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelctl.integrations.lightning import LightningAccelerator

OUT, ACCELERATOR, DEVICES = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])


class ConvNet(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU())
        self.head = torch.nn.Linear(4 * 6 * 6, 2)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SaveWeights(lightning.pytorch.Callback):
    def on_train_end(self, trainer, model):
        if trainer.global_rank == 0:
            OUT.mkdir(parents=True, exist_ok=True)
            weights = {k: v.cpu() for k, v in model.state_dict().items()}
            torch.save(weights, OUT / "weights.pt")


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(32, 1, 8, 8, generator=generator)
    y = torch.randint(0, 2, (32,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=8)


if __name__ == "__main__":
    accelerator = "cpu" if ACCELERATOR == "cpu" else LightningAccelerator(ACCELERATOR)
    trainer = lightning.Trainer(
        accelerator=accelerator,
        devices=DEVICES,
        max_epochs=2,
        callbacks=[SaveWeights()],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
    )
    trainer.fit(ConvNet(), loader())

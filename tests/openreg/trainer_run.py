"""accelctl's Trainer for the openreg tests: ``accelctl launch ... trainer_run.py OUT FIT[,FIT]``.

Each FIT trains the same model on the same data into ``OUT/<fit>/`` (its own ``root_dir``, with a
checkpoint every epoch), then every process writes ``rank<r>.pt`` (its final weights) and
``rank<r>.json`` (where and how it ran):

- ``fp32``: 2 epochs, ``precision="32"``;
- ``restart``: the same, with a checkpoint every 3 steps too; rank 1 kills itself with SIGKILL at
  step 7 of the group's first attempt (``--max-restarts 1`` starts the group again, and the fit
  resumes from the step-6 checkpoint by itself);
- ``bf16``: the same as ``fp32`` in ``bf16-mixed``;
- ``cpu``: the same as ``fp32`` on 2 CPU processes over gloo (the reference), in the processes
  the launcher started for openreg (each fit of several processes makes its group and leaves it).

Between two fits rank 0 lags behind (as when it alone writes files): the next fit's group must
not rendezvous on the previous one's addresses.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelctl

OUT, FITS = Path(sys.argv[1]), sys.argv[2].split(",")
RANK = int(os.environ.get("RANK", "0"))
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


class Net(nn.Module):
    def __init__(self, fit: str) -> None:
        super().__init__()
        self.fit = fit
        self.layer = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)
        self.ran: set[tuple[str, str]] = set()
        self.seen: list[int] = []
        self.backend = None

    def training_step(self, batch, batch_idx):
        if self.fit == "restart" and RANK == 1 and ATTEMPT == 0 and trainer.global_step == 6:
            os.kill(os.getpid(), signal.SIGKILL)  # at step 7 of the first attempt
        ids, x, y = batch
        hidden = self.layer(x)
        self.ran.add((str(hidden.device), str(hidden.dtype)))
        self.seen.extend(ids.tolist())
        return nn.functional.mse_loss(self.head(torch.relu(hidden)).float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def on_epoch_end(self, trainer):
        self.backend = torch.distributed.get_backend()


generator = torch.Generator().manual_seed(0)
x = torch.randn(64, 4, generator=generator)
data = TensorDataset(torch.arange(64), x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))

for fit in FITS:
    torch.manual_seed(100 + RANK)  # different initial weights: DDP must start from rank 0's
    model = Net(fit)
    trainer = accelctl.Trainer(
        accelerator="cpu" if fit == "cpu" else "auto",
        devices=2,
        max_epochs=2,
        root_dir=OUT / fit,
        precision="bf16-mixed" if fit == "bf16" else "32",
        checkpoint_every_n_steps=3 if fit == "restart" else None,
        log_every_n_steps=2,
        enable_progress_bar=False,
    )
    torch.manual_seed(0)  # the same shuffled order in every run
    trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True))
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, OUT / fit / f"rank{RANK}.pt")
    report = {
        "accelerator": trainer.accelerator.name,
        "device": str(trainer.device),
        "world_size": trainer.world_size,
        "backend": model.backend,
        "ran": sorted(model.ran),
        "seen_epoch0": model.seen[:32],
        "metrics": trainer.metrics,
    }
    (OUT / fit / f"rank{RANK}.json").write_text(json.dumps(report))
    if RANK == 0:
        time.sleep(0.5)

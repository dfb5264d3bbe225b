"""The training of the SLURM tests: ``python train_script.py OUT [DEVICES] [--pace]``.

Three epochs of a linear model on 64 samples, 8 a batch, seeded: with two processes, 4 steps an
epoch each, a logging step every 2. Rank 0 saves the final weights to ``OUT/final.pt``; every
process writes ``OUT/rank<R>.json`` (its rank, world size, local rank and SLURM node). DEVICES is
the Trainer's ``devices`` (default ``"auto"``). ``--pace``: in the job's first run, after step 2,
rank 0 writes ``OUT/running``, every process waits for ``OUT/signalled`` (the test writes it once
it has sent its signal) and then sleeps 0.3 s a step, so that the signal arrives mid-run.
``--hang``: rank 1 sleeps for 10 minutes in its third step.
"""

import json
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelctl

out = sys.argv[1]
devices = sys.argv[2] if len(sys.argv) > 2 else "auto"
pace = "--pace" in sys.argv and os.environ.get("SLURM_RESTART_COUNT", "0") == "0"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        if "--hang" in sys.argv and trainer.global_rank == 1 and trainer.global_step == 2:
            time.sleep(600)
        if pace and trainer.global_step >= 2:
            if trainer.global_step == 2:
                if trainer.is_global_zero:
                    open(os.path.join(out, "running"), "w").close()
                for _ in range(3000):  # a hang guard of 5 minutes
                    if os.path.exists(os.path.join(out, "signalled")):
                        break
                    time.sleep(0.1)
            time.sleep(0.3)
        x, y = batch
        return nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(64, 4, generator=g)
data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))
model = Net()
trainer = accelctl.Trainer(accelerator="cpu", devices=devices, max_epochs=3, root_dir=out,
                           log_every_n_steps=2, enable_progress_bar=False)  # fmt: skip
trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True))
if trainer.is_global_zero:
    torch.save(model.state_dict(), os.path.join(out, "final.pt"))
place = {
    "rank": trainer.global_rank,
    "world_size": trainer.world_size,
    "local_rank": int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))),
    "node": os.environ.get("SLURMD_NODENAME"),
}
with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as file:
    json.dump(place, file)

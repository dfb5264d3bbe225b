"""A training script for the supervision tests: ``python supervised_script.py OUT MODE``.

Every process writes its pid to ``OUT/pid<rank>`` first; then, by MODE:

- ``train``: trains 3 epochs (4 steps an epoch per rank with 2 ranks), checkpoints every 2 steps;
- ``kill`` / ``hang``: rank 1 SIGKILLs itself / sleeps at optimizer step 3;
- ``kill-once``: like ``train``, but rank 1 SIGKILLs itself at step 7 of the first attempt only;
- ``sleep`` / ``stubborn``: sleeps before training (``stubborn`` ignores SIGINT);
- ``interruptible``: like ``train`` until step 4 is checkpointed (the first epoch's end), then
  writes ``OUT/ready`` (rank 0) and sleeps in step 5, for a Ctrl-C.

Each rank saves its final weights to ``OUT/final<rank>.pt``.
"""

import os
import signal
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelctl

out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ.get("RANK", "0"))
with open(os.path.join(out, f"pid{rank}"), "w") as file:
    file.write(str(os.getpid()))
if mode in ("sleep", "stubborn"):
    if mode == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(600)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        step = trainer.global_step + 1
        if rank == 1 and mode == "kill" and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == 1 and mode == "hang" and step == 3:
            time.sleep(600)
        if mode == "interruptible" and step == 5:
            if rank == 0:
                open(os.path.join(out, "ready"), "w").close()
            time.sleep(600)
        marker = os.path.join(out, "killed-once")
        if rank == 1 and mode == "kill-once" and step == 7 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch
        return nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(64, 4, generator=g)
data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))
model = Net()
trainer = accelctl.Trainer(
    max_epochs=3, root_dir=out, log_every_n_steps=2, checkpoint_every_n_steps=2
)
trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True))
torch.save(model.state_dict(), os.path.join(out, f"final{rank}.pt"))

"""The Ray tests' driver for missing kernels, run after ``ray_run.py``'s runs.

``python ray_kernels_run.py OUT ADDRESS``, on the cluster at ADDRESS.

A model whose Conv2d needs a kernel torch_openreg lacks (0.0.3: no convolution), trained by
``accelctl.Trainer`` in 2 workers:

- ``fallback``: on the 2 openreg devices, ``ACCELCTL_CPU_FALLBACK=1`` set in this driver alone
  (the nodes never see it): the convolution runs on the CPU;
- ``cpu``: the same on 2 CPU workers (the reference);
- then on openreg without the switch: ``fit()`` fails, and this script ends on its error, as a
  user's would (the test reads what it wrote on standard error).

Every worker writes ``OUT/<run>/rank<r>.pt`` (its final weights) and ``rank<r>.json``.
"""

import json
import os
import sys
import time
from pathlib import Path

import ray
import ray.train
import torch
from ray.train.torch import TorchTrainer
from torch import nn

from accelctl.integrations.ray import TorchConfig

OUT, ADDRESS = Path(sys.argv[1]), sys.argv[2]


class ConvNet(nn.Module):
    """No norm layer: torch decomposes those on openreg, a ulp off the CPU's."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU())
        self.head = nn.Linear(4 * 6 * 6, 2)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train(config: dict) -> None:
    import accelctl

    rank = ray.train.get_context().get_world_rank()
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(32, 1, 8, 8, generator=generator)
    y = torch.randint(0, 2, (32,), generator=generator)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    torch.manual_seed(0)
    model = ConvNet()
    out = Path(config["out"])
    trainer = accelctl.Trainer(max_epochs=2, root_dir=out, enable_progress_bar=False)
    trainer.fit(model, loader)
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, out / f"rank{rank}.pt")
    report = {"device": str(trainer.device), "metrics": trainer.metrics}
    (out / f"rank{rank}.json").write_text(json.dumps(report))


def fit(run: str, accelerator: str, resources: dict) -> None:
    out = OUT / run
    out.mkdir(parents=True, exist_ok=True)
    TorchTrainer(
        train,
        train_loop_config={"out": str(out)},
        torch_config=TorchConfig(accelerator),
        scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker=resources),
        run_config=ray.train.RunConfig(name=f"kernels-{run}", storage_path=str(OUT / "storage")),
    ).fit()


ray.init(address=ADDRESS, logging_level="WARNING")
while len([node for node in ray.nodes() if node["Alive"]]) < 2:  # the second node joins
    time.sleep(0.5)

os.environ["ACCELCTL_CPU_FALLBACK"] = "1"  # read where the TorchConfig is made
fit("fallback", "openreg", {"CPU": 1, "openreg": 1})
del os.environ["ACCELCTL_CPU_FALLBACK"]
fit("cpu", "cpu", {"CPU": 1})
fit("stopped", "openreg", {"CPU": 1, "openreg": 1})  # raises: the script ends on it

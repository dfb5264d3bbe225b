"""The Ray tests' driver: ``python ray_run.py OUT ADDRESS``, on the cluster at ADDRESS.

Three Ray Train runs of ``TorchTrainer`` with ``accelctl.integrations.ray.TorchConfig``, each
writing into ``OUT/<run>/``; ``OUT/<run>/driver.json`` says how ``fit`` ended:

- ``openreg``: 2 workers on the node that advertises 2 openreg devices, over occl. Each worker
  trains with ``accelctl.Trainer`` (a checkpoint every 3 steps), then with a hand-written loop
  (``prepare_model``, ``prepare_data_loader``). Worker 1 kills itself with SIGKILL at step 7 of
  the first attempt; ``FailureConfig(max_failures=1)`` makes Ray start the group again.
- ``cpu``: the same on 2 CPU workers over gloo, never stopped (the reference).
- ``misconfigured``: 1 openreg worker that asks for the head's resource ``no_openreg``, not
  ``openreg``: Ray puts it on the head, where the plugin is disabled; it must be refused.

Every worker writes ``<part>/rank<r>.pt`` (its final weights) and ``<part>/rank<r>.json``.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import ray
import ray.train
import torch
from ray.train.torch import TorchTrainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelctl.integrations.ray import TorchConfig

OUT, ADDRESS = Path(sys.argv[1]), sys.argv[2]


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    return TensorDataset(torch.arange(64), x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


class Net(nn.Module):
    def __init__(self, kill_at_step: int | None = None, marker: Path | None = None) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)
        self.kill_at_step, self.marker = kill_at_step, marker
        self.ran: set[tuple[str, str]] = set()
        self.trainer = None

    def forward(self, x):
        return self.head(torch.relu(self.layer(x)))

    def training_step(self, batch, batch_idx):
        if self.kill_at_step == self.trainer.global_step and not self.marker.exists():
            self.marker.touch()  # once: the restarted worker trains on
            os.kill(os.getpid(), signal.SIGKILL)
        _ids, x, y = batch
        out = self(x)
        self.ran.add((str(x.device), str(out.device)))
        return nn.functional.mse_loss(out, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def save(folder: Path, rank: int, model: nn.Module, report: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, folder / f"rank{rank}.pt")
    (folder / f"rank{rank}.json").write_text(json.dumps(report))


def train(config: dict) -> None:
    import accelctl
    from accelctl.integrations.ray import get_device, prepare_data_loader, prepare_model

    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    out = Path(config["out"])

    # accelctl's Trainer, with its default arguments: it runs on the worker's placement.
    torch.manual_seed(100 + rank)  # different initial weights: DDP must start from rank 0's
    model = Net(config["kill_at_step"] if rank == 1 else None, out / "killed")
    trainer = accelctl.Trainer(
        max_epochs=2,
        root_dir=out / "trainer",
        checkpoint_every_n_steps=3,
        log_every_n_steps=2,
        enable_progress_bar=False,
    )
    model.trainer = trainer
    torch.manual_seed(0)  # the same shuffled order in every run
    trainer.fit(model, DataLoader(data(), batch_size=8, shuffle=True))
    save(out / "trainer", rank, model, {
        "accelerator": trainer.accelerator.name,
        "device": str(trainer.device),
        "world_size": trainer.world_size,
        "backend": torch.distributed.get_backend(),
        "ran": sorted(model.ran),
        "metrics": trainer.metrics,
        "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
    })  # fmt: skip

    # A hand-written loop on the same placement.
    torch.manual_seed(100 + rank)
    net = Net()
    wrapped = prepare_model(net)
    torch.manual_seed(0)
    loader = prepare_data_loader(DataLoader(data(), batch_size=8, shuffle=True))
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.05, momentum=0.9)
    ran = set()
    for epoch in range(2):
        if world_size > 1:
            loader.sampler.set_epoch(epoch)
        for _ids, x, y in loader:
            prediction = wrapped(x)
            ran.add((str(x.device), str(prediction.device)))
            loss = nn.functional.mse_loss(prediction, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    save(out / "loop", rank, net, {
        "device": str(get_device()),
        "ran": sorted(ran),
        "wrapped": type(wrapped).__name__,
    })  # fmt: skip


def fit(run: str, torch_config: TorchConfig, resources: dict, workers: int, **options) -> None:
    out = OUT / run
    out.mkdir(parents=True, exist_ok=True)
    trainer = TorchTrainer(
        train,
        train_loop_config={"out": str(out), "kill_at_step": options.pop("kill_at_step", None)},
        torch_config=torch_config,
        scaling_config=ray.train.ScalingConfig(num_workers=workers, resources_per_worker=resources),
        run_config=ray.train.RunConfig(name=run, storage_path=str(OUT / "storage"), **options),
    )
    try:
        trainer.fit()
    except Exception as exc:  # the test reads how it ended
        (out / "driver.json").write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    else:
        (out / "driver.json").write_text(json.dumps({"error": None}))


ray.init(address=ADDRESS, logging_level="WARNING")
while len([node for node in ray.nodes() if node["Alive"]]) < 2:  # the second node joins
    time.sleep(0.5)

fit("openreg", TorchConfig("openreg"), {"CPU": 1, "openreg": 1}, 2, kill_at_step=6,
    failure_config=ray.train.FailureConfig(max_failures=1))  # fmt: skip
fit("cpu", TorchConfig("cpu"), {"CPU": 1}, 2)
fit("misconfigured", TorchConfig("openreg"), {"CPU": 1, "no_openreg": 1}, 1)

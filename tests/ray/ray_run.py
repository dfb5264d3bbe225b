"""The Ray tests' driver: ``python ray_run.py OUT ADDRESS``, on the cluster at ADDRESS.

Ray Train runs of ``TorchTrainer`` with ``accelctl.integrations.ray.TorchConfig``, each
writing into ``OUT/<run>/``; ``OUT/<run>/driver.json`` says how ``fit`` ended, and what its
``Result`` held (``metrics``, the path of ``checkpoint``):

- ``openreg``: 2 workers on the node that advertises 2 openreg devices, over occl. Each worker
  trains with ``accelctl.Trainer`` (a checkpoint every 3 steps), then with a hand-written loop
  (``prepare_model``, ``prepare_data_loader``). Worker 1 kills itself with SIGKILL at step 7 of
  the first attempt; ``FailureConfig(max_failures=1)`` makes Ray start the group again.
- ``cpu``: the same on 2 CPU workers over gloo, never stopped (the reference).
- ``resubmit``: the Trainer alone on 2 CPU workers, twice under one ``RunConfig(name)``: the
  first ``fit()`` fails at step 7 (worker 1 raises, no ``max_failures``), the second (the job
  resubmitted) trains into a new, empty ``root_dir`` (``trainer-b``), so that Ray's checkpoint
  is all it can resume from.
- ``raydata``: the Trainer alone on 2 CPU workers, its loader a Ray Data shard
  (``dataset_loader``), each worker noting the ids of the rows it trained on.
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

from accelctl.integrations.ray import TorchConfig, dataset_loader

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
        self.ids: dict[int, list[int]] = {}
        self.trainer = None

    def forward(self, x):
        return self.head(torch.relu(self.layer(x)))

    def training_step(self, batch, batch_idx):
        if self.kill_at_step == self.trainer.global_step and not self.marker.exists():
            self.marker.touch()  # once: the restarted worker trains on
            if self.marker.name == "failed":
                raise RuntimeError("the first fit() fails here")
            os.kill(os.getpid(), signal.SIGKILL)
        if isinstance(batch, dict):  # a Ray Data batch
            ids, x, y = batch["id"], batch["x"], batch["y"]
            self.ids.setdefault(self.trainer.current_epoch, []).extend(ids.tolist())
        else:
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
    part = config.get("part", "trainer")

    # accelctl's Trainer, with its default arguments: it runs on the worker's placement.
    torch.manual_seed(100 + rank)  # different initial weights: DDP must start from rank 0's
    model = Net(config["kill_at_step"] if rank == 1 else None, out / config.get("marker", "killed"))
    trainer = accelctl.Trainer(
        max_epochs=2,
        root_dir=out / part,
        checkpoint_every_n_steps=3,
        log_every_n_steps=2,
        enable_progress_bar=False,
    )
    model.trainer = trainer
    torch.manual_seed(0)  # the same shuffled order in every run
    loader = DataLoader(data(), batch_size=8, shuffle=True)
    if config.get("ray_data"):
        loader = dataset_loader("train", batch_size=8)
    trainer.fit(model, loader)
    save(out / part, rank, model, {
        "accelerator": trainer.accelerator.name,
        "device": str(trainer.device),
        "world_size": trainer.world_size,
        "backend": torch.distributed.get_backend(),
        "ran": sorted(model.ran),
        "metrics": trainer.metrics,
        "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
        "ids": model.ids,
        "device_stats": sorted(trainer.accelerator.device_stats(trainer.device)),
    })  # fmt: skip
    if not config.get("loop", True):
        return

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


def fit(
    run: str,
    torch_config: TorchConfig,
    resources: dict,
    workers: int,
    *,
    config: dict | None = None,
    record: str = "driver.json",
    datasets: dict | None = None,
    **options,
) -> None:
    out = OUT / run
    out.mkdir(parents=True, exist_ok=True)
    trainer = TorchTrainer(
        train,
        train_loop_config={"out": str(out), "kill_at_step": None, **(config or {})},
        torch_config=torch_config,
        scaling_config=ray.train.ScalingConfig(num_workers=workers, resources_per_worker=resources),
        run_config=ray.train.RunConfig(name=run, storage_path=str(OUT / "storage"), **options),
        datasets=datasets,
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # the test reads how it ended
        (out / record).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    else:
        checkpoint = result.checkpoint.path if result.checkpoint is not None else None
        (out / record).write_text(
            json.dumps({"error": None, "metrics": result.metrics, "checkpoint": checkpoint})
        )


def ray_data():
    import numpy as np
    import ray.data

    ids, x, y = data().tensors
    rows = [{"id": int(i), "x": x[i].numpy(), "y": y[i].numpy().astype(np.float32)} for i in ids]
    return ray.data.from_items(rows)


ray.init(address=ADDRESS, logging_level="WARNING")
while len([node for node in ray.nodes() if node["Alive"]]) < 2:  # the second node joins
    time.sleep(0.5)

fit("openreg", TorchConfig("openreg"), {"CPU": 1, "openreg": 1}, 2, config={"kill_at_step": 6},
    failure_config=ray.train.FailureConfig(max_failures=1))  # fmt: skip
fit("cpu", TorchConfig("cpu"), {"CPU": 1}, 2)
stop_first = {"kill_at_step": 6, "marker": "failed", "loop": False}
fit("resubmit", TorchConfig("cpu"), {"CPU": 1}, 2, record="first.json",
    config={**stop_first, "part": "trainer-a"})  # fmt: skip
fit("resubmit", TorchConfig("cpu"), {"CPU": 1}, 2, config={"part": "trainer-b", "loop": False})
fit("raydata", TorchConfig("cpu"), {"CPU": 1}, 2, config={"ray_data": True, "loop": False},
    datasets={"train": ray_data()})  # fmt: skip
fit("misconfigured", TorchConfig("openreg"), {"CPU": 1, "no_openreg": 1}, 1)

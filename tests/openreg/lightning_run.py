"""A Lightning training script for the openreg tests: ``python lightning_run.py OUT MODE``.

MODE ``launched`` (under ``accelctl launch --accelerator openreg --devices 2``): the fit ``ddp``
(``strategy="ddp"``), the same fit ``bf16`` in ``bf16-mixed``, a few steps of ``fabric``, then
the fit ``cpu``: Lightning's own 2-CPU-process run (its ``CPUAccelerator`` and ``DDPStrategy``,
in a gloo group the script makes), the reference. ``ddp_spawn``: the fit ``ddp_spawn``,
Lightning's spawned workers. ``default``: the fit ``default``, no strategy: Lightning starts
the second process itself. Every process writes ``OUT/<fit>/rank<r>.pt`` (its final weights)
and ``rank<r>.json`` (where and how it ran).
"""

import json
import os
import sys
from pathlib import Path

import lightning
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelctl.integrations.lightning import LightningAccelerator

OUT, MODE = Path(sys.argv[1]), sys.argv[2]


class Net(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        # Different initial weights per process: DDP must start every replica from rank 0's.
        torch.manual_seed(100 + int(os.environ.get("LOCAL_RANK", "0")))
        self.layer = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)
        self.ran: set[tuple[str, str]] = set()
        self.seen: list[int] = []

    def forward(self, x):
        hidden = self.layer(x)
        self.ran.add((str(hidden.device), str(hidden.dtype)))
        return self.head(torch.relu(hidden))

    def training_step(self, batch, batch_idx):
        ids, x, y = batch
        self.seen.extend(ids.tolist())
        loss = torch.nn.functional.mse_loss(self(x).float(), y)
        self.log("train_loss", loss, sync_dist=True)  # a mean across the processes
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Report(lightning.pytorch.Callback):
    """Written by every process at the end of its own fit (spawned workers included)."""

    def __init__(self, fit: str) -> None:
        self.fit = fit

    def on_train_end(self, trainer, model):
        folder = OUT / self.fit
        folder.mkdir(parents=True, exist_ok=True)
        rank = trainer.global_rank
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, folder / f"rank{rank}.pt")
        report = {
            "world_size": trainer.world_size,
            "strategy": type(trainer.strategy).__name__,
            "backend": torch.distributed.get_backend(),
            "root_device": str(trainer.strategy.root_device),
            "ran": sorted(model.ran),
            "seen_epoch0": model.seen[: len(model.seen) // 2],
            "train_loss": float(trainer.callback_metrics["train_loss"]),
        }
        (folder / f"rank{rank}.json").write_text(json.dumps(report))


def data() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return DataLoader(TensorDataset(torch.arange(64), x, y), batch_size=8, shuffle=True)


class LeaveGroup(lightning.pytorch.Callback):
    """Leave the process group before the process ends.

    An occl group still alive at exit may abort the process in its transport's teardown (``terminate
    called without an active exception``, an emulator limit).
    """

    def teardown(self, trainer, model, stage):
        torch.distributed.destroy_process_group()


def fit(fit: str, accelerator, last: bool = True, **options) -> None:
    trainer = lightning.Trainer(
        accelerator=accelerator,
        devices=2,
        max_epochs=2,
        callbacks=[Report(fit), *([LeaveGroup()] if last else [])],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        **options,
    )
    lightning.seed_everything(0)  # the same shuffled order in every run (no verbose= in 2.3)
    trainer.fit(Net(), data())


def fabric_steps() -> None:
    """Fabric on the same processes: its DDP wrap and a mean of integers across processes."""
    fabric = lightning.Fabric(accelerator=LightningAccelerator("openreg"), devices=2)
    fabric.launch()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)  # the optimizer made before, as usual
    start = [p.detach().cpu().clone() for p in model.parameters()]  # rank 0's, broadcast
    for _, x, y in fabric.setup_dataloaders(data()):
        loss = torch.nn.functional.mse_loss(model(x), y)  # through DDP's forward
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    mean = fabric.all_reduce(torch.tensor(fabric.global_rank * 3, device=fabric.device))
    weights = [p.detach().cpu() for p in model.parameters()]
    folder = OUT / "fabric"
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(weights, folder / f"rank{fabric.global_rank}.pt")
    trained = all(not torch.equal(a, b) for a, b in zip(start, weights, strict=True))
    report = {
        "device": str(fabric.device),
        "mean": mean.item(),
        "dtype": str(mean.dtype),
        "trained": trained,
    }
    (folder / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    if MODE == "launched":
        # One group for the three openreg fits (Lightning keeps its group between fits), left
        # once: a second group made in these processes would rendezvous on the first's keys.
        fit("ddp", LightningAccelerator("openreg"), last=False, strategy="ddp")
        options = {"strategy": "ddp", "precision": "bf16-mixed"}
        fit("bf16", LightningAccelerator("openreg"), last=False, **options)
        fabric_steps()
        torch.distributed.destroy_process_group()
        # A gloo group for the reference, on keys of its own in torchrun's store (Lightning takes
        # a group that exists as it is).
        store, rank, world_size = next(torch.distributed.rendezvous("env://"))
        store = torch.distributed.PrefixStore("cpu-reference", store)
        torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        fit("cpu", "cpu", strategy="ddp")
    elif MODE == "ddp_spawn":
        fit("ddp_spawn", LightningAccelerator("openreg"), strategy="ddp_spawn")
    else:
        fit("default", LightningAccelerator("openreg"))

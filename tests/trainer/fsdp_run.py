"""accelctl's Trainer with ``strategy="fsdp"``, for the tests, under ``accelctl launch``.

``accelctl launch --cpu --devices 2 fsdp_run.py OUT RUN[,RUN] [CHECKPOINT]`` (or on another
accelerator, ``--accelerator``).

Each RUN trains the same model (same seed, same data) into ``OUT/<run>/``, then every process
writes ``rank<r>.pt`` (the final weights, gathered whole) and ``rank<r>.json`` (what it saw):

- ``hand``: FSDP2 written by hand: ``fully_shard`` on each block and the root, a
  ``DistributedSampler``, SGD with momentum; in a process group of its own;
- ``whole``: the Trainer, ``strategy="fsdp"``, 3 epochs, a checkpoint every 5 steps;
- ``cut``: the same, stopped at step 7 by an exception (the checkpoint of step 5 is the last);
- ``resumed``: the same again, resumed from ``cut``'s ``last.ckpt``;
- ``bf16`` / ``fp16``: 1 epoch in ``"bf16-mixed"`` / ``"16-mixed"``;
- ``val``: 1 epoch validated on 45 samples in batches of 11, shards of 3 and 2 batches;
- ``plain`` / ``plain-bf16``: ``whole`` / ``bf16`` without dropout, to compare two device types:
  dropout draws from the device's own generator, whose draws differ from one device type to
  another (torch_openreg 0.0.3 has its own, as CUDA has);
- ``plain-cut``: ``plain`` stopped at step 7, as ``cut``;
- ``plain-resumed``: ``plain`` resumed from CHECKPOINT (written by another run, on another
  device type, say), in a run folder of its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelctl

RANK = int(os.environ.get("RANK", "0"))
EPOCHS, EVERY, STOP_AT = 3, 5, 7


class Stop(Exception):
    """Stands for a kill at a step."""


class Net(nn.Module):
    """Blocks in a ``ModuleList`` (each an FSDP unit), a parameter of the root's own, and dropout.

    The root's parameter is the root's unit; dropout's random states are what a resume restores.
    """

    def __init__(self, stop_at: int | None = None, dropout: float = 0.2) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(2))
        self.head = nn.Linear(16, 2)
        self.temperature = nn.Parameter(torch.ones(1))
        self.drop = nn.Dropout(dropout)
        self.stop_at, self.steps = stop_at, 0
        self.dtypes: set[str] = set()
        self.final: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.embed(x))
        for block in self.blocks:
            hidden = self.drop(torch.relu(block(hidden)))
        self.dtypes.add(str(hidden.dtype))
        return self.head(hidden) * self.temperature

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps += 1
        if self.steps == self.stop_at:
            raise Stop(f"stopped at step {self.steps}")
        x, y = batch
        return F.cross_entropy(self(x).float(), y)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"loss": F.cross_entropy(self(x).float(), y)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def on_epoch_end(self, trainer: accelctl.Trainer) -> None:
        if trainer.current_epoch == trainer.max_epochs - 1:  # every rank: a collective
            self.final = whole_weights(self)


def whole_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    options = StateDictOptions(full_state_dict=True)
    return {k: v.detach().cpu() for k, v in get_model_state_dict(model, options=options).items()}


def dataset(samples: int = 80, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 8, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())  # 4 steps an epoch per process


def loader() -> DataLoader[Any]:
    return DataLoader(dataset(), batch_size=10, shuffle=True)


def hand() -> tuple[dict[str, torch.Tensor], Net]:
    """The same training as the Trainer's, written with torch alone."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.utils.data import DistributedSampler

    selection = accelctl.resolve()
    device = selection.devices[int(os.environ["LOCAL_RANK"])]
    dist.init_process_group(selection.distributed_backend)
    torch.manual_seed(0)
    model = Net().to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for unit in (model.embed, *model.blocks, model.head):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = model.configure_optimizers()
    data = dataset()
    sampler = DistributedSampler(data, dist.get_world_size(), dist.get_rank(), shuffle=True)
    batches = DataLoader(data, batch_size=10, sampler=sampler)
    torch.manual_seed(1)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in batches:
            loss = F.cross_entropy(model(x.to(device)).float(), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    weights = whole_weights(model)
    dist.destroy_process_group()
    return weights, model


def fit(
    run: str, out: Path, checkpoint: str | None = None
) -> tuple[dict[str, torch.Tensor], Net, dict[str, Any]]:
    """One of the Trainer's runs."""
    torch.manual_seed(0)
    stop_at = STOP_AT if run in ("cut", "plain-cut") else None
    model = Net(stop_at=stop_at, dropout=0.0 if "plain" in run else 0.2)
    precision = {"bf16": "bf16-mixed", "plain-bf16": "bf16-mixed", "fp16": "16-mixed"}
    trainer = accelctl.Trainer(
        strategy="fsdp",
        max_epochs=1 if run in ("bf16", "plain-bf16", "fp16", "val") else EPOCHS,
        precision=precision.get(run, "32"),
        root_dir=out / ("cut" if run == "resumed" else run),
        checkpoint_every_n_steps=EVERY,
        log_every_n_steps=2,
        enable_progress_bar=False,
    )
    torch.manual_seed(1)
    seen: dict[str, Any] = {"device": str(trainer.device), "world_size": trainer.world_size}
    try:
        validation = DataLoader(dataset(45, seed=1), batch_size=11) if run == "val" else None
        resume = {"resumed": "last", "plain-resumed": checkpoint}.get(run)
        trainer.fit(model, loader(), validation, ckpt_path=resume)
    except Stop as stop:
        seen["stopped"] = str(stop)
    seen.update(metrics=trainer.metrics, global_step=trainer.global_step)
    return model.final, model, seen


def main(out: Path, runs: list[str], checkpoint: str | None = None) -> None:
    for run in runs:
        if run == "hand":
            weights, model = hand()
            seen: dict[str, Any] = {}
        else:
            weights, model, seen = fit(run, out, checkpoint)
        seen["dtypes"] = sorted(model.dtypes)
        folder = out / run
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(weights, folder / f"rank{RANK}.pt")
        (folder / f"rank{RANK}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2].split(","), *sys.argv[3:4])

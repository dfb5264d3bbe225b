"""Stopped and resumed fits of accelctl's Trainer, for the exact-resume tests.

Imported by path (tests are not a package); also run by ``resume_run.py`` under ``accelctl launch``.

A :class:`Case` is a loader, a way to stop and a step: the fit stops there (an exception at a
step, one at the first step after an epoch's end, or the requeue signal), is resumed with
``ckpt_path="last"`` by a fresh model in a fresh process state, and must end with the weights of
the fit that never stopped, bit for bit on the CPU.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, Sampler, TensorDataset

import accelctl

EPOCHS, SAMPLES, BATCH = 3, 80, 10
#: Mid-epoch checkpoints of the "step" stops: every this many steps.
EVERY = 3

#: The loaders the docs allow in one process, and in several (the Trainer shards the first two,
#: leaves a DistributedSampler alone, and refuses samplers it cannot shard).
LOADERS = ("shuffle", "generator", "sampler-generator", "stateful", "distributed", "set-epoch")
SHARDED_LOADERS = ("shuffle", "generator", "distributed")
STOPS = ("step", "epoch-end", "signal")


class Stop(Exception):
    """Stands for a kill at a step."""


def world() -> tuple[int, int]:
    """(rank, world size) of this process, from what ``accelctl launch`` sets."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def steps_per_epoch() -> int:
    return SAMPLES // BATCH // world()[1]


class StatefulSampler(Sampler[int]):
    """A sampler shuffling with its own ``random.Random``, restorable only through ``state_dict``.

    No torch generator: its order can be restored only through that state.
    """

    def __init__(self, count: int, seed: int = 5) -> None:
        self.count, self.random = count, random.Random(seed)

    def __iter__(self) -> Any:
        order = list(range(self.count))
        self.random.shuffle(order)
        return iter(order)

    def __len__(self) -> int:
        return self.count

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.random.getstate()
        return {"version": version, "internal": list(internal), "gauss": gauss}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.random.setstate((state["version"], tuple(state["internal"]), state["gauss"]))


class EpochSampler(Sampler[int]):
    """An order decided by the epoch alone (``set_epoch``, which the Trainer calls)."""

    def __init__(self, count: int, seed: int = 11) -> None:
        self.count, self.seed, self.epoch = count, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.count, generator=generator).tolist())

    def __len__(self) -> int:
        return self.count


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 8, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


def make_loader(kind: str) -> DataLoader[Any]:
    """A training loader of ``kind`` (:data:`LOADERS`); its own generators seeded alike."""
    data = dataset()
    if kind == "shuffle":  # torch's global generator
        return DataLoader(data, batch_size=BATCH, shuffle=True)
    if kind == "generator":  # the loader's own
        own = torch.Generator().manual_seed(7)
        return DataLoader(data, batch_size=BATCH, shuffle=True, generator=own)
    if kind == "sampler-generator":
        sampler = RandomSampler(data, generator=torch.Generator().manual_seed(7))
        return DataLoader(data, batch_size=BATCH, sampler=sampler)
    if kind == "stateful":
        return DataLoader(data, batch_size=BATCH, sampler=StatefulSampler(len(data)))
    if kind == "distributed":
        rank, size = world()
        sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True, seed=3)
        return DataLoader(data, batch_size=BATCH, sampler=sampler)
    if kind == "set-epoch":
        return DataLoader(data, batch_size=BATCH, sampler=EpochSampler(len(data)))
    raise ValueError(f"loader kind {kind!r}: one of {', '.join(LOADERS)}")


class Net(nn.Module):
    """Two blocks (FSDP units), dropout, and Python's and NumPy's random numbers in the loss.

    Every random source a resume restores. Stops at step ``stop_at`` as ``how`` says.
    """

    def __init__(self, stop_at: int = 0, how: str = "step") -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 16), nn.Linear(16, 2)])
        self.drop = nn.Dropout(0.2)
        self.stop_at, self.how, self.steps = stop_at, how, 0
        self.final: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[1](self.drop(torch.relu(self.blocks[0](x))))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps += 1
        if self.steps == self.stop_at:
            if self.how == "signal":  # the fit stops at a checkpoint (requeue_signal)
                os.kill(os.getpid(), signal.SIGUSR1)
            else:
                raise Stop(f"stopped at step {self.steps}")
        x, y = batch
        scale = 1.0 + 0.1 * random.random() + 0.1 * float(numpy.random.rand())
        return F.cross_entropy(self(x), y) * scale

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def on_epoch_end(self, trainer: accelctl.Trainer) -> None:
        if trainer.current_epoch == trainer.max_epochs - 1:  # on every rank: a collective
            options = StateDictOptions(full_state_dict=True)
            state = get_model_state_dict(self, options=options)
            self.final = {key: value.detach().cpu().clone() for key, value in state.items()}


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)


@dataclass(frozen=True)
class Case:
    """One stopped and resumed fit."""

    loader: str
    stop: str  # one of STOPS
    #: The step the fit stops at ("epoch-end": the epoch after whose end it stops, from 1).
    at: int
    fsdp: bool = False

    @property
    def stop_step(self) -> int:
        """The step whose training_step stops the fit."""
        return self.at * steps_per_epoch() + 1 if self.stop == "epoch-end" else self.at

    def trainer(self, root: Path) -> accelctl.Trainer:
        return accelctl.Trainer(
            accelerator="cpu",
            strategy="fsdp" if self.fsdp else "auto",
            max_epochs=EPOCHS,
            root_dir=root,
            log_every_n_steps=2,
            enable_progress_bar=False,
            checkpoint_every_n_steps=EVERY if self.stop == "step" else None,
            requeue_signal="SIGUSR1" if self.stop == "signal" else None,
        )


def uninterrupted(loader: str, fsdp: bool, root: Path) -> dict[str, torch.Tensor]:
    """The final weights of a fit that never stopped."""
    seed_everything(0)
    model = Net()
    Case(loader, "step", 0, fsdp).trainer(root).fit(model, make_loader(loader))
    return model.final


def stopped_and_resumed(
    case: Case, root: Path
) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """Return the final weights of ``case``'s stopped and resumed fit, and its checkpoint.

    The checkpoint's ``epoch``, ``batches_done`` and ``global_step``, read by rank 0 only (None
    elsewhere): rank 0 writes ``last.ckpt``, and another rank may stop at its next step while rank 0
    still replaces the file (the resumed fit reads it after rank 0 has planned the run).
    """
    seed_everything(0)
    try:
        case.trainer(root).fit(Net(case.stop_step, case.stop), make_loader(case.loader))
    except (Stop, SystemExit):  # SystemExit: the requeue signal's, after its checkpoint
        pass
    else:
        raise AssertionError(f"{case} did not stop")
    point = None
    if world()[0] == 0:
        last = torch.load(root / "checkpoints" / "run-0" / "last.ckpt", weights_only=True)
        point = {key: last[key] for key in ("epoch", "batches_done", "global_step")}
    seed_everything(1234)  # another process: other initial weights, other random states
    model = Net()
    case.trainer(root).fit(model, make_loader(case.loader), ckpt_path="last")
    return model.final, point


def resume_point(case: Case) -> int:
    """The step of the checkpoint ``case``'s fit resumes from."""
    steps = steps_per_epoch()
    if case.stop == "epoch-end":
        return case.at * steps
    if case.stop == "signal":  # one process: at once; several: at the next logging step
        return case.at if world()[1] == 1 else -(-case.at // 2) * 2
    before = case.at - 1  # the last checkpoint before the stopping step
    return max(before - before % EVERY, before - before % steps)


def differences(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> list[str]:
    """The tensors where ``state`` and ``expected`` differ (bit for bit)."""
    assert state.keys() == expected.keys(), (sorted(state), sorted(expected))
    return [key for key in expected if not torch.equal(state[key], expected[key])]

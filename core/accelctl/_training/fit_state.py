"""The state of one ``fit``, as plain records, and the Trainer as a fit sees it.

Each record has one meaning; the Trainer as a fit sees it is :class:`FitOwner`.

- :class:`FitConfig`: what the fit is given and checks before anything is set up; fixed.
- :class:`Training`: what the set-up builds for the epochs (the model's optimizer, the
  checkpointer, the sharded loaders, the resume point), made whole at once.
- :class:`FitState`: what changes as the fit runs and its stop report reads.

A record is complete when it is made: no attribute waits for a later phase to be set.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .callbacks import Callback
from .checkpoint import CheckpointConfig, Checkpointer, LastCheckpoint, Resume
from .precision import Precision
from .runs import Identity, RunPlan
from .throughput import Throughput

if TYPE_CHECKING:
    import torch

    from .._contract.peak import DevicePeak
    from .._host.handle import AcceleratorHandle


class FitOwner(Protocol):
    """The Trainer as its fits see it: the settings they read and the results they write.

    The settings a fit reads and the results it writes back (``global_step``, ``current_epoch`` and
    ``metrics``, current while the fit runs, for ``on_epoch_end``). A protocol: the Trainer's module
    imports this one, not the reverse."""

    max_epochs: int
    log_every_n_steps: int
    precision: Precision
    strategy: str
    root_dir: Path
    enable_progress_bar: bool | None
    checkpointing: CheckpointConfig
    accelerator: AcceleratorHandle
    devices: list[torch.device]
    device: torch.device
    run_dir: Path | None
    metrics: dict[str, float]
    flops_per_sample: float | str | None
    global_step: int
    current_epoch: int
    callbacks: tuple[Callback, ...]


@dataclass(frozen=True)
class FitConfig:
    """What one fit is given and checks before it sets anything up; fixed for the fit."""

    #: This process's device.
    device: torch.device
    #: FSDP2 shards the model (``strategy="fsdp"``), also in one process (a 1-process group).
    sharded: bool
    #: The precision's autocast for the forward passes (reusable).
    autocast: AbstractContextManager[Any]
    #: float16's gradient scaler (None for the other precisions).
    scaler: torch.amp.GradScaler | None
    #: The checkpoint to resume from, as given (``fit``'s argument or ``ACCELCTL_CKPT_PATH``).
    ckpt_path: str | os.PathLike[str] | None
    #: ``ACCELCTL_PEAK_FLOPS`` (None when unset).
    declared_peak: DevicePeak | None
    #: The job, the node and the restarts this process belongs to.
    identity: Identity
    #: The process group's timeout for a collective.
    timeout: datetime.timedelta


@dataclass(frozen=True)
class Training:
    """What the set-up builds for the epochs, once the device and the run's plan are there."""

    #: The run's plan (None: checkpoints are off, the fit has no run folder).
    plan: RunPlan | None
    optimizer: torch.optim.Optimizer
    checkpointer: Checkpointer
    #: The model's ``training_step``; under DDP, through DDP's forward.
    training_step: Callable[[Any, int], Any]
    #: The loaders, sharded across the processes.
    train_loader: Iterable[Any]
    val_loader: Iterable[Any] | None
    #: The model's FLOPs per sample and the devices' peak (``flops_per_second``, ``mfu``).
    throughput: Throughput
    #: Where a resumed fit starts (None: from the start).
    resume: Resume | None

    @property
    def first_epoch(self) -> int:
        """The epoch the loop starts in: the checkpoint's, or 0."""
        return self.resume.epoch if self.resume is not None else 0


@dataclass
class FitState:
    """What changes as the fit runs, for the report of a fit that stops."""

    #: The trainer's step when the training loop began (None: it never began); a step ran in
    #: this fit where the trainer's step is past it.
    first_step: int | None = None
    #: The last checkpoint written or resumed from (None: none).
    last_checkpoint: LastCheckpoint | None = None

"""``accelctl.Trainer``: a small training loop on whatever accelerator the registry selects.

The reference consumer of the registry: it resolves an accelerator by name, alias, ``"gpu"``,
``"auto"`` or instance, and uses it through its handle (``setup_device``, ``device_stats``,
``teardown``, ``distributed_backend``). It is deliberately small: one optimizer, epochs of
``training_step`` and optional ``validation_step``, mixed precision, DDP under a launcher,
checkpoints that resume exactly, and figures in ``<root_dir>/metrics.jsonl``. Reach for Lightning
(``accelctl.integrations.lightning``) for callbacks, schedulers and the rest.

.. code-block:: python

    class Net(torch.nn.Module):
        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            return {"accuracy": (self(x).argmax(1) == y).float().mean()}

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())

    trainer = accelctl.Trainer(accelerator="auto", max_epochs=3, precision="bf16-mixed")
    trainer.fit(Net(), train_loader, val_loader)
    print(trainer.metrics)  # {"train_loss": ..., "samples_per_second": ..., "val_accuracy": ...}
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._choice.process_environment import ProcessEnvironment
from .._choice.selection import resolve
from .._contract import settings
from .._host.handle import AcceleratorHandle
from .._launching.error_line import one_line_when_raised
from .callbacks import Callback, check_callbacks
from .checkpoint import CheckpointConfig, whole_number
from .data import check_loader
from .fit import Fit
from .fsdp import refuse_fsdp_gaps, refuse_fsdp_without_backend
from .model import check_model
from .precision import Precision, parse_precision
from .processes import (
    alone_on_first_device,
    choose_device,
    launch_hint,
)
from .requeue import RequeueOnSignal, parse_requeue_signal
from .strategy import parse_strategy
from .throughput import parse_flops_per_sample

if TYPE_CHECKING:
    from torch import nn


class Trainer:
    """Train a ``torch.nn.Module`` on the accelerator the registry selects.

    :param accelerator: ``"auto"`` (``ACCELCTL_ACCELERATOR`` when set, else the available
        accelerator of highest priority), ``"gpu"``, a name or alias, or an
        :class:`accelctl.Accelerator` instance.
    :param devices: a devices spec of that accelerator; ``"auto"`` means ``ACCELCTL_DEVICES`` when
        set (by ``accelctl launch``), else, under a launcher, one device per process it started,
        else, in a process started alone, the first device (a warning gives the ``accelctl
        launch`` line that uses them all).
    :param max_epochs: passes over the training data.
    :param precision: ``"32"``, ``"bf16-mixed"`` or ``"16-mixed"`` (``torch.autocast`` on the
        device's type; float16 also scales the loss).
    :param root_dir: where ``metrics.jsonl`` is written (created when missing), and the run
        folders: each fit writes its checkpoints into one of its own,
        ``<root_dir>/checkpoints/run-N`` (:attr:`run_dir`), so that runs sharing a ``root_dir``
        never overwrite each other's.
    :param log_every_n_steps: optimizer steps between lines of ``metrics.jsonl`` (each such step
        waits for the device to read the loss; no other step does).
    :param enable_progress_bar: None: a tqdm bar when standard output is a terminal.
    :param enable_checkpointing: write ``last.ckpt`` into the fit's run folder at the end of
        every epoch (rank 0, atomically), for :meth:`fit`'s ``ckpt_path`` to resume from.
    :param checkpoint_every_n_steps: also write it every this many optimizer steps (None: at
        epoch ends only).
    :param keep_best: also keep the best this many epoch-end checkpoints, ranked by
        ``best_metric`` (a key of :attr:`metrics`, such as ``"val_loss"``), lower is better with
        ``best_mode="min"``, higher with ``"max"``.
    :param requeue_signal: a signal (``"SIGUSR1"``, a number) on which :meth:`fit` stops at a
        checkpoint and requeues its SLURM job, which resumes from there; ``"auto"``: SIGUSR1
        inside a SLURM job that nothing else handles it in; None: never.
    :param strategy: ``"auto"`` (DDP with several processes, the model as it is with one),
        ``"ddp"`` (the same), or ``"fsdp"``: FSDP2's ``fully_shard`` shards parameters, gradients
        and optimizer states over the processes (also one: a group of one process), with
        sharded checkpoints (docs/training.md, "Sharded training (FSDP2)"). A device that lacks
        what FSDP2 needs is refused, naming what it lacks: here when several devices are asked
        for in a process started alone, else when :meth:`fit` has set the device up.
    :param callbacks: objects with an ``on_report(trainer, report)`` method, called on every
        process at each point where :meth:`fit` wrote a line of ``metrics.jsonl`` or a
        checkpoint, with what it wrote (docs/training.md, "Callbacks"). A framework's bridge
        adds its own in its workers (the Ray bridge reports to Ray Train).
    :param flops_per_sample: the model's FLOPs per sample of one training step (forward and
        backward), for the figures ``flops_per_second`` and ``mfu`` (model FLOPs utilisation:
        of the devices' peak, where the plugin's ``device_peak`` or ``ACCELCTL_PEAK_FLOPS``
        knows it). ``"auto"``: counted once, on the first step, by torch's ``FlopCounterMode``
        (matrix products, convolutions, attention); a number: as declared (a model whose cost
        per sample varies); None: neither figure.

    The accelerator and devices are resolved here, and checked against the processes that run,
    so a wrong name, a bad spec or a device/process mismatch fails at once: a
    :class:`~accelctl.ProcessSetupError` for several devices asked for outside a launcher (its
    message has the ``accelctl launch`` command), on an accelerator without a distributed
    backend, or on one whose backend torch does not have for its devices. After
    :meth:`fit`: :attr:`accelerator`, :attr:`devices`, :attr:`device`, :attr:`global_rank`,
    :attr:`world_size` and :attr:`metrics`.
    """

    @one_line_when_raised  # a refusal here ends a script as accelctl's line, as fit's do
    def __init__(
        self,
        accelerator: Any = "auto",
        devices: Any = "auto",
        max_epochs: int = 1,
        precision: str | int = "32",
        root_dir: str | os.PathLike[str] = ".",
        log_every_n_steps: int = 50,
        enable_progress_bar: bool | None = None,
        enable_checkpointing: bool = True,
        checkpoint_every_n_steps: int | None = None,
        keep_best: int = 0,
        best_metric: str = "val_loss",
        best_mode: str = "min",
        requeue_signal: Any = "auto",
        strategy: str = "auto",
        callbacks: Iterable[Any] | None = None,
        flops_per_sample: float | str | None = "auto",
    ) -> None:
        self.max_epochs = whole_number("max_epochs", max_epochs)
        self.log_every_n_steps = whole_number("log_every_n_steps", log_every_n_steps)
        self.precision = Precision(parse_precision(precision))
        #: ``"auto"``, ``"ddp"`` or ``"fsdp"``.
        self.strategy = parse_strategy(strategy)
        #: The callbacks :meth:`fit` reports to (besides those a bridge adds in its workers).
        self.callbacks: tuple[Callback, ...] = check_callbacks(callbacks)
        #: ``"auto"``, the model's declared FLOPs per sample, or None (docs/training.md).
        self.flops_per_sample = parse_flops_per_sample(flops_per_sample)
        self.root_dir = Path(root_dir)
        self.enable_progress_bar = enable_progress_bar
        #: When :meth:`fit` writes checkpoints and which it keeps.
        self.checkpointing = CheckpointConfig(
            enable_checkpointing, checkpoint_every_n_steps, keep_best, best_metric, best_mode
        )
        self._requeue = parse_requeue_signal(requeue_signal, checkpointing=enable_checkpointing)
        self._env = ProcessEnvironment.from_environ(os.environ)
        auto = isinstance(devices, str) and devices.strip().lower() == "auto"
        auto = auto and not settings.SelectionVariables.read().devices  # ACCELCTL_DEVICES: as given
        if auto and self._env.launched:
            devices = self._env.local_world_size  # a plain torchrun: one device per process
        selection = resolve(accelerator, devices)
        if auto and not self._env.launched:  # `python train.py`: one device, and how to use all
            selection = alone_on_first_device(selection, launch_hint(selection))
        #: The accelerator's handle.
        self.accelerator: AcceleratorHandle = selection.accelerator
        #: One device per process on this machine, in local-rank order.
        self.devices: list[torch.device] = selection.devices
        if self.strategy == "fsdp":
            backend = self.accelerator.info.distributed_backend
            # Alone with several devices, this process is only told to launch (below): probe
            # now, so that nothing is launched for nothing. Else fit probes its own device.
            if len(self.devices) > 1 and not self._env.launched:
                refuse_fsdp_gaps(self.accelerator.name, self.devices[0].type, backend)
            else:
                refuse_fsdp_without_backend(self.accelerator.name, backend)
        #: This process's device (``devices[LOCAL_RANK]`` under a launcher). Choosing it checks
        #: that the devices fit the processes, so a mismatch known now is refused now, not in fit.
        self.device: torch.device = choose_device(
            selection, env=self._env, launch_command_line=launch_hint(selection)
        )
        #: This process's rank among all processes (0 when alone).
        self.global_rank: int = self._env.rank
        #: Processes in the run (1 when alone).
        self.world_size: int = self._env.world_size
        #: The last epoch's figures: ``train_loss``, ``samples_per_second``, ``val_*``, and
        #: ``flops_per_second`` and ``mfu`` where known.
        self.metrics: dict[str, float] = {}
        #: The folder :meth:`fit` writes its checkpoints into, ``<root_dir>/checkpoints/run-N``
        #: (its own, or the one it continues; docs/training.md, "Runs and their folders"); None
        #: before a fit, and with ``enable_checkpointing=False``.
        self.run_dir: Path | None = None
        #: Optimizer steps taken by :meth:`fit` so far.
        self.global_step = 0
        #: The epoch being trained (from 0).
        self.current_epoch = 0

    @property
    def is_global_zero(self) -> bool:
        """True in the process that writes files and shows the progress bar."""
        return self.global_rank == 0

    # -- fit --------------------------------------------------------------------------------

    @one_line_when_raised
    def fit(
        self,
        model: nn.Module,
        train_dataloader: Iterable[Any],
        val_dataloader: Iterable[Any] | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> None:
        """Train ``model`` for ``max_epochs`` epochs.

        Validated after each when ``val_dataloader`` is given.

        ``model`` defines ``training_step(batch, batch_idx) -> loss tensor`` and
        ``configure_optimizers() -> optimizer``, and optionally
        ``validation_step(batch, batch_idx) -> dict of figures`` (tensors or numbers, averaged
        over samples into ``val_<name>``), and ``on_epoch_end(trainer)``, called on every process
        after each epoch once :attr:`metrics` holds its figures (to print or save; check
        :attr:`is_global_zero` to do it once). The model is trained in place.

        :param ckpt_path: resume from a checkpoint: ``"last"`` for the newest run's
            ``last.ckpt`` under ``<root_dir>/checkpoints`` (training from the start, with a
            warning, when there is none yet), or a checkpoint's path. None:
            ``ACCELCTL_CKPT_PATH`` when set, else from the start, except in a group that was
            restarted (``accelctl launch --max-restarts``, a SLURM requeue, Ray Train), which
            resumes its own run's ``last.ckpt`` by itself. ``"last"``, a run's own ``last.ckpt``
            and a restart continue that run in its folder (refused while another fit writes
            it); any other checkpoint starts a new run from it. A resumed fit continues exactly
            where the checkpoint was written: same weights, optimizer and random states, the
            rest of the epoch's batches in the same order (the trained ones are read again and
            dropped). Rank 0 logs what it runs on, each epoch, each checkpoint and why it
            stopped (``accelctl.trainer`` logger; docs/training.md, "The log").
        """
        check_model(model, validating=val_dataloader is not None)
        check_loader(train_dataloader, "train_dataloader")
        if val_dataloader is not None:
            check_loader(val_dataloader, "val_dataloader")
        requeue = RequeueOnSignal(self._requeue.signum, explicit=self._requeue.explicit)
        fit = Fit(self, model, ckpt_path, env=self._env, requeue=requeue)
        fit.run(train_dataloader, val_dataloader)

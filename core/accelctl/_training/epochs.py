"""The epochs of one ``fit``: their steps, logging windows, validation and checkpoints.

:class:`Epochs` is made once the fit is set up (its :class:`.fit_state.Training`, whole) and runs
the loop from the first epoch (the checkpoint's, when resumed) to the trainer's ``max_epochs``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from .._choice.process_environment import ProcessEnvironment
from .._contract import settings
from .._contract.errors import AccelctlError, PluginWarning, TrainerError, warn_user
from .._kernels.setup import fallback_calls
from .._kernels.translate import missing_kernel_error
from .callbacks import Reporting
from .checkpoint import LAST, LastCheckpoint, LoopState, resumed_batches
from .data import batch_size, move_to_device, set_epoch
from .figures import EpochTally, validate
from .fit_state import FitConfig, FitOwner, FitState, Training
from .fsdp import in_lockstep
from .hangs import Progress
from .metrics_log import MetricsLog
from .progress import progress_bar, redirected_logging
from .report import FitReport
from .requeue import RequeueOnSignal
from .rng import epoch_rng_state

if TYPE_CHECKING:
    from torch import nn


class FitParts(Protocol):
    """A fit as its epochs see it: what it was given, and the logs and watches it opened."""

    trainer: FitOwner
    model: nn.Module
    env: ProcessEnvironment
    requeue: RequeueOnSignal
    config: FitConfig
    #: The human log (rank 0's lines) and the metrics log.
    report: FitReport
    log: MetricsLog
    #: What each point of the fit reports to the callbacks.
    reporting: Reporting
    #: Where the loop is, for the hang watch's report.
    progress: Progress
    state: FitState


class Epochs:
    """The training loop of one set-up fit; :meth:`run` trains its epochs."""

    def __init__(self, fit: FitParts, training: Training) -> None:
        self.trainer, self.model, self.env = fit.trainer, fit.model, fit.env
        self.config, self.training, self.state = fit.config, training, fit.state
        self.device = fit.config.device
        self.requeue, self.report, self.log = fit.requeue, fit.report, fit.log
        self.reporting, self.progress = fit.reporting, fit.progress
        #: Whether the log lines carry the device's stats: rank 0's, until the hook fails once.
        self.device_stats = fit.env.rank == 0
        #: The random states the current epoch started from, for its mid-epoch checkpoints
        #: (None when none is written).
        self.epoch_rng: Mapping[str, Any] | None = None

    def run(self) -> None:
        """Train the epochs from the first (the checkpoint's, when resumed) to ``max_epochs``."""
        for epoch in range(self.training.first_epoch, self.trainer.max_epochs):
            self._run_epoch(epoch)

    def _run_epoch(self, epoch: int) -> None:
        """Train, validate, report the figures, call ``on_epoch_end``, write the checkpoint."""
        trainer, model, training = self.trainer, self.model, self.training
        trainer.current_epoch = epoch
        set_epoch(training.train_loader, epoch)
        model.train()
        figures = self._train(epoch, self._batches(epoch))
        if training.val_loader is not None:
            self.progress.mark("validation", trainer.global_step)
            model.eval()
            batches = training.val_loader
            if self.config.sharded and self.env.distributed:  # every forward is a collective
                batches = in_lockstep(batches, self._validation_forward, self.device)
            with torch.no_grad():
                figures.update(
                    validate(model, self.config.autocast, batches, device=self.device, env=self.env)
                )
        trainer.metrics = figures
        self.log.write({"kind": "epoch", "epoch": epoch, "step": trainer.global_step, **figures})
        wanted = self.device_stats and self.reporting.wanted
        self.reporting.line("epoch", figures, self._device_stats() if wanted else {})
        self.report.epoch(epoch, trainer.max_epochs, trainer.global_step, figures)
        on_epoch_end = getattr(model, "on_epoch_end", None)
        if callable(on_epoch_end):
            self.progress.mark("on_epoch_end", trainer.global_step)
            on_epoch_end(trainer)
        if trainer.checkpointing.enabled:  # after on_epoch_end: the states the next epoch has
            self.progress.mark("the epoch's checkpoint", trainer.global_step)
            # The next epoch's order depends on the states now (its loader's generators too).
            next_epoch = epoch_rng_state(training.train_loader, self.device)
            best = training.checkpointer.save(
                LoopState(epoch + 1, 0, trainer.global_step, next_epoch, figures), epoch_end=True
            )
            self._written(epoch, best)
        self.reporting.done(epoch)

    def _validation_forward(self, batch: Any) -> None:
        """A validation step whose figures are dropped (:func:`.fsdp.in_lockstep`)."""
        with self.config.autocast:
            cast(Any, self.model).validation_step(move_to_device(batch, self.device), 0)

    def _batches(self, epoch: int) -> Iterable[tuple[int, Any]]:
        """Yield the epoch's numbered batches, resuming where a checkpoint stopped.

        Its data order is replayed and the batches it trained skipped. Notes the states the epoch
        starts from when a mid-epoch checkpoint may need them."""
        resume, loader = self.training.resume, self.training.train_loader
        restores = resume is not None and (resume.batches_done or resume.epoch_rng is not None)
        if resume is not None and restores and epoch == resume.epoch:
            self.epoch_rng = resume.epoch_rng
            return resumed_batches(loader, resume, self.device)
        self.epoch_rng = None
        if self._every_n_steps is not None or self.requeue.armed:
            self.epoch_rng = epoch_rng_state(loader, self.device)
        return enumerate(loader)

    @property
    def _every_n_steps(self) -> int | None:
        """Optimizer steps between mid-epoch checkpoints (None: none)."""
        checkpointing = self.trainer.checkpointing
        return checkpointing.every_n_steps if checkpointing.enabled else None

    def _train(self, epoch: int, batches: Iterable[tuple[int, Any]]) -> dict[str, float]:
        """The epoch's optimizer steps; its figures, agreed across processes."""
        trainer = self.trainer
        tally = EpochTally(self.device, self.env)
        bar = None
        if self.env.rank == 0:
            description = f"epoch {epoch + 1}/{trainer.max_epochs}"
            bar = progress_bar(
                trainer.enable_progress_bar,
                total=_length(self.training.train_loader),
                description=description,
            )
        try:
            with redirected_logging(bar):
                self._train_steps(epoch, batches, tally, bar)
        finally:
            if bar is not None:
                bar.close()
        figures = tally.figures()
        figures.update(self.training.throughput.figures(figures["samples_per_second"]))
        calls = fallback_calls(self.device.type)
        if calls is not None:  # ACCELCTL_CPU_FALLBACK: the cost, in every epoch's figures
            figures["cpu_fallback_calls"] = float(calls)
        return figures

    def _train_steps(
        self, epoch: int, batches: Iterable[tuple[int, Any]], tally: EpochTally, bar: Any | None
    ) -> None:
        """The loop of :meth:`_train`: a step per batch, its window's line, its checkpoints."""
        every, saving = self.trainer.log_every_n_steps, self._every_n_steps
        for batch_idx, batch in batches:
            step = self._step(batch_idx, batch, tally)
            if bar is not None:
                bar.update(1)
            stop = self.requeue.requested and not self.env.distributed
            if step % every == 0:
                stop = self._log_window(epoch, tally, bar)
            if stop or (saving is not None and step % saving == 0):
                self.progress.mark("a checkpoint", step)
                self._save_mid_epoch(epoch, batch_idx + 1)
            self.reporting.done(epoch)  # the step's line and checkpoint, if it wrote any
            if stop:
                self._requeue(epoch)
            self.progress.mark("loading a batch", step)

    def _step(self, batch_idx: int, batch: Any, tally: EpochTally) -> int:
        """One optimizer step on ``batch``; the trainer's new ``global_step``."""
        training, config = self.training, self.config
        step = self.trainer.global_step + 1
        self.progress.mark("training_step", step)
        batch = move_to_device(batch, self.device)
        samples = batch_size(batch)
        with training.throughput.counting(samples):  # the first step's forward and backward
            with config.autocast:
                loss = training.training_step(batch, batch_idx)
            if not isinstance(loss, torch.Tensor):
                raise TrainerError(
                    f"training_step must return the loss as a tensor, returned "
                    f"{type(loss).__name__} (batch {batch_idx})"
                )
            training.optimizer.zero_grad(set_to_none=True)
            collective = "reduce-scatter" if config.sharded else "all-reduce"
            self.progress.mark(f"backward (the gradients' {collective})", step)
            scaled = config.scaler.scale(loss) if config.scaler is not None else loss
            try:
                scaled.backward()  # type: ignore[no-untyped-call]
            except RuntimeError as exc:  # the graph names what the engine's error does not
                missing = missing_kernel_error(
                    exc,
                    accelerator=self.trainer.accelerator.plugin_name,
                    device=self.device,
                    model=self.model,
                    loss=scaled,
                )
                if missing is not None:
                    raise missing from exc
                raise
        if config.scaler is not None:
            config.scaler.step(training.optimizer)
            config.scaler.update()
        else:
            training.optimizer.step()
        tally.add(loss, samples)
        self.trainer.global_step = step
        return step

    def _log_window(self, epoch: int, tally: EpochTally, bar: Any | None) -> bool:
        """Close the logging window: its line in the metrics log, the bar's loss.

        Whether any process asks to stop on the requeue signal (the request rides on the window's
        all-reduce, so that all stop at the same step)."""
        step = self.trainer.global_step
        self.progress.mark("the figures' all-reduce", step)
        window = tally.close_window(stop=self.requeue.requested)
        mean, per_second = window.mean_loss, window.samples_per_second
        record: dict[str, Any] = {
            "kind": "step",
            "step": step,
            "epoch": epoch,
            "train_loss": mean,
            "samples_per_second": per_second,
            **self.training.throughput.figures(per_second),
        }
        figures = {k: v for k, v in record.items() if k not in ("kind", "step", "epoch")}
        stats = self._device_stats() if self.device_stats else {}
        record.update((k, v) for k, v in stats.items() if k not in record)
        self.log.write(record)
        self.reporting.line("step", figures, stats)
        if bar is not None:
            bar.set_postfix(loss=f"{mean:.4g}", refresh=False)
        return window.stop

    def _device_stats(self) -> dict[str, int | float]:
        """Return the device's stats for a log line.

        A hook that breaks is warned about once and not asked again during this fit."""
        try:
            return self.trainer.accelerator.device_stats(self.device)
        except AccelctlError as exc:
            self.device_stats = False
            warn_user(f"device stats disabled for this fit: {exc}", PluginWarning)
            return {}

    def _save_mid_epoch(self, epoch: int, batches_done: int) -> None:
        """``last.ckpt`` after ``batches_done`` batches of ``epoch``, to resume there."""
        trainer = self.trainer
        self.training.checkpointer.save(
            LoopState(epoch, batches_done, trainer.global_step, self.epoch_rng, trainer.metrics)
        )
        self._written(epoch, None)

    def _written(self, epoch: int, best: str | None) -> None:
        """A checkpoint was written in ``epoch``: its line in the log, and the launcher's note."""
        plan = self.training.plan
        if plan is None:
            return
        last, step = plan.folder / LAST, self.trainer.global_step
        self.state.last_checkpoint = LastCheckpoint(last, epoch, step)
        self.reporting.checkpoint(last)
        self.report.checkpoint(
            last.resolve(),
            epoch=epoch,
            step=step,
            best=plan.folder / best if best is not None else None,
        )
        if self.env.rank == 0:
            note_launcher(last.resolve(), epoch=epoch, step=step)

    def _requeue(self, epoch: int) -> None:
        """Stop at the checkpoint just written: requeue the SLURM job and exit."""
        step, plan = self.trainer.global_step, self.training.plan
        self.log.write({"kind": "requeue", "step": step, "epoch": epoch})
        self.requeue.leave(
            rank=self.env.rank,
            world_size=self.env.world_size,
            step=step,
            checkpoint=plan.folder / LAST if plan is not None else Path(LAST),
        )


def note_launcher(path: Path, *, epoch: int, step: int) -> None:
    """Tell ``accelctl launch`` where the last checkpoint is.

    Through the file ``ACCELCTL_LAUNCH_NOTE`` names, for its report when it is interrupted;
    nothing outside a launch."""
    note = settings.launch_note()
    if note is None:
        return
    import json

    temporary = f"{note}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w") as file:
            json.dump({"checkpoint": str(path), "epoch": epoch, "step": step}, file)
        os.replace(temporary, note)
    except OSError:  # the launcher's folder went away: only its report loses the line
        pass


def _length(loader: Iterable[Any]) -> int | None:
    """Batches in ``loader`` when it knows (an iterable dataset's loader may not)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None

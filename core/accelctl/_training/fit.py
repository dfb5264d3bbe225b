"""One call of :meth:`accelctl.Trainer.fit`, as an object.

The Trainer is the configuration and the results; each ``fit`` makes a :class:`Fit`, which holds
what lives for that call only: the process group it joined, the hang watch, the requeue handler,
the metrics log, the optimizer, gradient scaler and autocast, the sharded loaders, the
checkpointer and the resume point. Its methods are the fit's phases: set up the processes and the
model, train an epoch (its steps, logging windows and mid-epoch checkpoints), validate, write the
epoch's checkpoint, and finish (leave the group, tear the device down).
"""

from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from .. import _settings
from .._error_line import reported, show_as_one_line
from .._errors import AccelctlError, PluginWarning, TrainerError, warn_user
from .._kernels.error import MissingKernelError
from .._kernels.setup import KernelSetup, fallback_calls, set_up_kernels
from .._kernels.translate import missing_kernel_error
from .._selection import known_name
from .callbacks import Callback, Reporting
from .checkpoint import (
    LAST,
    CheckpointConfig,
    Checkpointer,
    CheckpointError,
    LastCheckpoint,
    LoopState,
    Resume,
    Stateful,
    resumed_batches,
)
from .data import batch_size, move_to_device, set_epoch, shard_loader
from .figures import EpochTally, validate
from .fsdp import in_lockstep, refuse_fsdp_gaps, shard_model, sharded_grad_scaler
from .hangs import HangWatch, Progress
from .metrics_log import METRICS_FILE, MetricsLog
from .model import TrainingStep, optimizer_of
from .precision import Precision
from .processes import ProcessEnvironment, join_process_group
from .progress import progress_bar, redirected_logging
from .report import FitReport
from .requeue import RequeueError, RequeueOnSignal
from .rng import epoch_rng_state, set_rng_state
from .runs import Identity, RunFolders, RunPlan, check_ckpt_path, without_folder
from .throughput import Throughput, peak_flops
from .timeouts import collective_timeout

if TYPE_CHECKING:
    from torch import nn

    from .._plugin import AcceleratorHandle


class FitOwner(Protocol):
    """The Trainer as its fits see it: the settings a fit reads and the results it writes back
    (``global_step``, ``current_epoch`` and ``metrics``, current while the fit runs, for
    ``on_epoch_end``). A protocol: the Trainer's module imports this one, not the reverse."""

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


class Fit:
    """One ``fit`` of ``model`` for ``trainer``; :meth:`run` runs it, once.

    Made before anything needs undoing: ``ckpt_path`` and the precision are checked here;
    :meth:`run` sets up the device and the processes, plans the run's folder (rank 0, for all),
    opens the metrics log, and whatever happens, undoes that before it returns or raises.
    """

    def __init__(
        self,
        trainer: FitOwner,
        model: nn.Module,
        ckpt_path: str | os.PathLike[str] | None,
        *,
        env: ProcessEnvironment,
        requeue: RequeueOnSignal,
    ) -> None:
        self.trainer, self.model, self.env, self.requeue = trainer, model, env, requeue
        self.device = trainer.device
        self.autocast = trainer.precision.autocast(self.device)
        #: FSDP2 shards the model (``strategy="fsdp"``), also in one process (a 1-process group).
        self.sharded = trainer.strategy == "fsdp"
        self.scaler = (
            sharded_grad_scaler(trainer.precision, self.device)
            if self.sharded
            else trainer.precision.grad_scaler(self.device)
        )
        given_as = "ckpt_path"
        from_environ = _settings.ckpt_path() if ckpt_path is None else None
        if from_environ is not None:
            # ACCELCTL_CKPT_PATH: resume a script without editing it (the launcher's advice).
            ckpt_path, given_as = from_environ, _settings.CKPT_PATH
        # A wrong path fails here, before any process group or device is set up.
        check_ckpt_path(ckpt_path, trainer.root_dir, given_as=given_as)
        self.ckpt_path = ckpt_path
        #: ACCELCTL_PEAK_FLOPS, read (and refused when malformed) before anything is set up.
        self.declared_peak = _settings.declared_peak()
        self.identity = Identity.from_environ()
        restarts = self.identity.restarts
        self.timeout = collective_timeout()
        #: The human log (rank 0's lines); the metrics log is opened once the run is planned.
        self.report = FitReport(env.rank == 0)
        self.log = MetricsLog(None)
        #: Rank 0's run folders (its lock on the fit's folder), and the plan all ranks share.
        self.runs = RunFolders(trainer.root_dir, self.identity) if env.rank == 0 else None
        self.plan: RunPlan | None = None
        #: The checkpoint the plan resumes from (None: from the start).
        self.resume_from: Path | None = None
        #: The last checkpoint written or resumed from, for the reports.
        self.last_checkpoint: LastCheckpoint | None = None
        #: The trainer's step when the training loop began (None: it never began); a step ran
        #: in this fit where the trainer's step is past it.
        self.first_step: int | None = None
        #: Where the loop is, for the hang watch's report (several processes only).
        self.progress = Progress()
        self.watch = HangWatch(env, self.progress, restarts) if env.distributed else None
        self.owns_group = False  # True once this fit created the process group
        self.device_stats = env.rank == 0  # rank 0's, until the hook fails once
        #: What was done about the device's missing kernels (None until the device is set up).
        self.kernels: KernelSetup | None = None
        #: What each point of the fit reports to the callbacks (the trainer's, the process's).
        self.reporting = Reporting(trainer, trainer.callbacks)
        # Made by _set_up_training, once the device is set up:
        self.optimizer: torch.optim.Optimizer
        self.checkpointer: Checkpointer
        #: The model's FLOPs per sample and the devices' peak (``flops_per_second``, ``mfu``).
        self.throughput: Throughput
        #: The model's ``training_step``; under DDP, through DDP's forward.
        self.training_step: Callable[[Any, int], Any]
        self.train_loader: Iterable[Any]
        self.val_loader: Iterable[Any] | None
        #: Where a resumed fit starts (None: from the start).
        self.resume: Resume | None
        #: The random states the current epoch started from, for its mid-epoch checkpoints
        #: (None when none is written).
        self.epoch_rng: Any = None

    def run(self, train_dataloader: Iterable[Any], val_dataloader: Iterable[Any] | None) -> None:
        """Train for the trainer's ``max_epochs`` (from the checkpoint's epoch when resumed)."""
        try:
            self.requeue.arm()
            self._set_up_processes()
            self._plan_run()
            self._set_up_training(train_dataloader, val_dataloader)
            self.first_step = self.trainer.global_step
            first = self.resume.epoch if self.resume else 0
            for epoch in range(first, self.trainer.max_epochs):
                self._run_epoch(epoch)
            self._leave_together()
        except BaseException as exc:
            missing = self._missing_kernel(exc)
            # Before the group goes: the report asks the other processes through its store.
            step = self.trainer.global_step
            explained = (
                self.watch.explain(exc, timeout=self.timeout, step=step)
                if self.watch and missing is None
                else None
            )
            self._report_stop(missing or exc)
            self._finish(quiet=True)
            raised = explained or missing or exc
            if isinstance(raised, AccelctlError):
                # Every process raises it; should it end the program, it is one line for the
                # launch: rank 0's (under accelctl launch, the launcher's), no traceback.
                show_as_one_line(quiet=self.env.rank != 0)
            elif isinstance(exc, KeyboardInterrupt) and _settings.launcher_pid() is None:
                reported(exc)  # the log's line said it: no traceback after it
            if raised is not exc:
                raise raised from exc
            raise
        self.report.finished(max_epochs=self.trainer.max_epochs, step=self.trainer.global_step)
        self._finish(quiet=False)

    # -- set-up and finish -------------------------------------------------------------------

    def _set_up_processes(self) -> None:
        """Set the device up and, with several processes, join their group and watch for hangs
        (FSDP2 alone: a group of one process)."""
        accelerator = self.trainer.accelerator
        accelerator.setup_device(self.device)
        self.kernels = set_up_kernels(accelerator, self.device, rank=self.env.rank)
        backend = accelerator.info.distributed_backend
        if self.sharded:  # on the device it trains on, before any group: no FSDP stack trace
            refuse_fsdp_gaps(accelerator.name, self.device.type, backend)
        if self.watch is not None or self.sharded:
            assert backend is not None  # choose_device and refuse_fsdp_gaps refused None
            self.owns_group = join_process_group(backend, self.env, self.device, self.timeout)
        if self.watch is not None:  # several processes
            self.watch.start()

    def _plan_run(self) -> None:
        """Rank 0 plans the run folder and what to resume from (:mod:`.runs`), and every rank
        learns the plan (or rank 0's refusal) from it; then the logs are opened."""
        trainer, env = self.trainer, self.env
        # (the run's plan, the checkpoint to load, rank 0's refusal): rank 0's, sent to all.
        outcome: tuple[RunPlan | None, Path | None, str | None] = (None, None, None)
        if self.runs is not None and trainer.checkpointing.enabled:
            try:
                plan = self.runs.plan(self.ckpt_path)
                outcome = (plan, plan.resume_from, None)
            except CheckpointError as exc:
                outcome = (None, None, str(exc))
        elif self.runs is not None:  # no checkpoints, no run folder; a checkpoint still loads
            outcome = (None, without_folder(trainer.root_dir, self.ckpt_path), None)
        if env.world_size > 1:
            import torch.distributed as dist

            shared: list[Any] = [outcome]
            dist.broadcast_object_list(shared, src=0)
            outcome = shared[0]
        self.plan, self.resume_from, refusal = outcome
        if refusal is not None:
            raise CheckpointError(refusal)
        trainer.run_dir = self.plan.folder if self.plan is not None else None
        # The metrics log's lines are tagged with the run (an id of its own without a folder).
        run = self.plan.name if self.plan is not None else uuid.uuid4().hex[:12]
        log_file = trainer.root_dir / METRICS_FILE if env.rank == 0 else None
        self.log = MetricsLog(log_file, run=run, restart=self.identity.restarts)
        report = self.report
        report.started(
            accelerator=known_name(trainer.accelerator),
            devices=trainer.devices,
            strategy=_strategy_text(trainer.strategy, env.world_size),
            precision=trainer.precision.name,
            world_size=env.world_size,
            nodes=max(1, env.world_size // max(1, env.local_world_size)),
        )
        checkpointing = trainer.checkpointing
        when = "last.ckpt at each epoch's end"
        if checkpointing.every_n_steps:
            when += f" and every {checkpointing.every_n_steps} steps"
        if checkpointing.keep_best:
            when += f", the best {checkpointing.keep_best} by {checkpointing.best_metric}"
        folder = self.plan.folder.resolve() if self.plan is not None else None
        report.writing(
            run=self.plan.summary if self.plan else None,
            folder=folder,
            metrics=(trainer.root_dir / METRICS_FILE).resolve(),
            when=when,
        )

    def _set_up_training(
        self, train_dataloader: Iterable[Any], val_dataloader: Iterable[Any] | None
    ) -> None:
        """The model on the device (sharded by FSDP2 before its optimizer is made), its
        optimizer, the checkpointer, the state of a resume (before DDP wraps the model: every rank
        loads the same file), and the loaders, sharded."""
        model, trainer, env = self.model, self.trainer, self.env
        if self.sharded:
            shard_model(model, self.device, trainer.precision)
        else:
            model.to(self.device)
        self.optimizer = optimizer_of(model)
        self.checkpointer = Checkpointer(
            trainer.checkpointing,
            self.plan.folder if self.plan is not None else trainer.root_dir,
            Stateful(model, self.optimizer, self.scaler),
            env=env,
            device=self.device,
            run=self.plan.name if self.plan is not None else "",
        )
        trainer.global_step = 0
        self.resume = self._restore()
        # One process, or FSDP2 (its forward method): the model's own. Else through DDP's forward.
        self.training_step = cast(Any, model).training_step
        if env.distributed and not self.sharded:
            from torch.nn.parallel import DistributedDataParallel

            self.training_step = DistributedDataParallel(TrainingStep(model))
        rank, world = env.rank, env.world_size
        self.train_loader = shard_loader(train_dataloader, rank=rank, world_size=world, train=True)
        self.val_loader = None
        if val_dataloader is not None:
            self.val_loader = shard_loader(val_dataloader, rank=rank, world_size=world, train=False)
        peak = None
        if trainer.flops_per_sample is not None:
            peak = peak_flops(
                trainer.accelerator, self.device, trainer.precision.name, self.declared_peak
            )
        self.throughput = Throughput(trainer.flops_per_sample, peak, world)

    def _restore(self) -> Resume | None:
        """Load the checkpoint to resume from, if any; the trainer's step and figures are its."""
        if self.resume_from is None:
            return None
        resume = self.checkpointer.restore(self.resume_from)
        trainer = self.trainer
        trainer.global_step, trainer.metrics = resume.global_step, resume.metrics
        if not resume.batches_done and resume.rng is not None:
            set_rng_state(resume.rng, self.device)
        self.last_checkpoint = LastCheckpoint(self.resume_from, resume.epoch, resume.global_step)
        if resume.epoch >= trainer.max_epochs:
            self.report.nothing_to_train(
                self.resume_from, epochs_done=resume.epoch, max_epochs=trainer.max_epochs
            )
        else:
            self.report.resumed(
                self.resume_from,
                epoch=resume.epoch,
                batches_done=resume.batches_done,
                step=resume.global_step,
                max_epochs=trainer.max_epochs,
            )
        return resume

    def _leave_together(self) -> None:
        """The processes leave the group together: one that leaves (and exits) while rank 0
        still writes the last checkpoint can leave rank 0 hung in destroy_process_group
        (pytorch/pytorch#75097; seen once here, gloo under load)."""
        if self.owns_group:
            import torch.distributed as dist

            self.progress.mark("the end of the fit", self.trainer.global_step)
            dist.barrier()

    def _finish(self, *, quiet: bool) -> None:
        """Close the log, restore the signal's handler, stop the hang watcher, leave the process
        group this fit created, and call the accelerator's ``teardown``. After a failure
        (``quiet``) a cleanup error is only warned about, so that the training error surfaces."""
        self.log.close()
        if self.runs is not None:
            self.runs.release()
        self.requeue.disarm()
        if self.watch is not None:
            self.watch.stop()
        steps: list[Callable[[], object]] = [self.trainer.accelerator.teardown]
        if self.owns_group:
            import torch.distributed as dist

            steps.insert(0, dist.destroy_process_group)
        for cleanup in steps:
            try:
                cleanup()
            except Exception as exc:
                if not quiet:
                    raise
                warn_user(f"cleanup after a failed fit also failed: {exc}")

    # -- an epoch ----------------------------------------------------------------------------

    def _run_epoch(self, epoch: int) -> None:
        """Train, validate, report the figures, call ``on_epoch_end``, write the checkpoint."""
        trainer, model = self.trainer, self.model
        trainer.current_epoch = epoch
        set_epoch(self.train_loader, epoch)
        model.train()
        figures = self._train(epoch, self._batches(epoch))
        if self.val_loader is not None:
            self.progress.mark("validation", trainer.global_step)
            model.eval()
            batches = self.val_loader
            if self.sharded and self.env.distributed:  # every forward is a collective
                batches = in_lockstep(batches, self._validation_forward, self.device)
            with torch.no_grad():
                figures.update(
                    validate(model, self.autocast, batches, device=self.device, env=self.env)
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
            next_epoch = epoch_rng_state(self.train_loader, self.device)
            best = self.checkpointer.save(
                LoopState(epoch + 1, 0, trainer.global_step, next_epoch, figures), epoch_end=True
            )
            self._written(epoch, best)
        self.reporting.done(epoch)

    def _validation_forward(self, batch: Any) -> None:
        """A validation step whose figures are dropped (:func:`.fsdp.in_lockstep`)."""
        with self.autocast:
            cast(Any, self.model).validation_step(move_to_device(batch, self.device), 0)

    def _batches(self, epoch: int) -> Iterable[tuple[int, Any]]:
        """The epoch's numbered batches; for the epoch a checkpoint stopped in, its data order
        replayed and the batches it trained skipped. Notes the states the epoch starts from
        when a mid-epoch checkpoint may need them."""
        resume = self.resume
        restores = resume is not None and (resume.batches_done or resume.epoch_rng is not None)
        if resume is not None and restores and epoch == resume.epoch:
            self.epoch_rng = resume.epoch_rng
            return resumed_batches(self.train_loader, resume, self.device)
        self.epoch_rng = None
        if self._every_n_steps is not None or self.requeue.armed:
            self.epoch_rng = epoch_rng_state(self.train_loader, self.device)
        return enumerate(self.train_loader)

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
                total=_length(self.train_loader),
                description=description,
            )
        every, saving = trainer.log_every_n_steps, self._every_n_steps
        try:
            with redirected_logging(bar):
                self._train_steps(epoch, batches, tally, bar, every, saving)
        finally:
            if bar is not None:
                bar.close()
        figures = tally.figures()
        figures.update(self.throughput.figures(figures["samples_per_second"]))
        calls = fallback_calls(self.device.type)
        if calls is not None:  # ACCELCTL_CPU_FALLBACK: the cost, in every epoch's figures
            figures["cpu_fallback_calls"] = float(calls)
        return figures

    def _train_steps(
        self,
        epoch: int,
        batches: Iterable[tuple[int, Any]],
        tally: EpochTally,
        bar: Any | None,
        every: int,
        saving: int | None,
    ) -> None:
        """The loop of :meth:`_train`: a step per batch, its window's line, its checkpoints."""
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
        step = self.trainer.global_step + 1
        self.progress.mark("training_step", step)
        batch = move_to_device(batch, self.device)
        samples = batch_size(batch)
        with self.throughput.counting(samples):  # the first step's forward and backward
            with self.autocast:
                loss = self.training_step(batch, batch_idx)
            if not isinstance(loss, torch.Tensor):
                raise TrainerError(
                    f"training_step must return the loss as a tensor, returned "
                    f"{type(loss).__name__} (batch {batch_idx})"
                )
            self.optimizer.zero_grad(set_to_none=True)
            collective = "reduce-scatter" if self.sharded else "all-reduce"
            self.progress.mark(f"backward (the gradients' {collective})", step)
            scaled = self.scaler.scale(loss) if self.scaler is not None else loss
            try:
                scaled.backward()  # type: ignore[no-untyped-call]
            except RuntimeError as exc:  # the graph names what the engine's error does not
                missing = self._missing_kernel(exc, loss=scaled)
                if missing is not None:
                    raise missing from exc
                raise
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        tally.add(loss, samples)
        self.trainer.global_step = step
        return step

    def _log_window(self, epoch: int, tally: EpochTally, bar: Any | None) -> bool:
        """Close the logging window: its line in the metrics log, the bar's loss. Whether any
        process asks to stop on the requeue signal (the request rides on the window's
        all-reduce, so that all stop at the same step)."""
        step = self.trainer.global_step
        self.progress.mark("the figures' all-reduce", step)
        mean, per_second, stop = tally.close_window(stop=self.requeue.requested)
        record: dict[str, Any] = {
            "kind": "step",
            "step": step,
            "epoch": epoch,
            "train_loss": mean,
            "samples_per_second": per_second,
            **self.throughput.figures(per_second),
        }
        figures = {k: v for k, v in record.items() if k not in ("kind", "step", "epoch")}
        stats = self._device_stats() if self.device_stats else {}
        record.update((k, v) for k, v in stats.items() if k not in record)
        self.log.write(record)
        self.reporting.line("step", figures, stats)
        if bar is not None:
            bar.set_postfix(loss=f"{mean:.4g}", refresh=False)
        return stop

    def _device_stats(self) -> dict[str, int | float]:
        """The device's stats for a log line; a hook that breaks is warned about once and not
        asked again during this fit."""
        try:
            return self.trainer.accelerator.device_stats(self.device)
        except AccelctlError as exc:
            self.device_stats = False
            warn_user(f"device stats disabled for this fit: {exc}", PluginWarning)
            return {}

    def _save_mid_epoch(self, epoch: int, batches_done: int) -> None:
        """``last.ckpt`` after ``batches_done`` batches of ``epoch``, to resume there."""
        trainer = self.trainer
        self.checkpointer.save(
            LoopState(epoch, batches_done, trainer.global_step, self.epoch_rng, trainer.metrics)
        )
        self._written(epoch, None)

    def _written(self, epoch: int, best: str | None) -> None:
        """A checkpoint was written in ``epoch``: its line in the log, and the launcher's note."""
        if self.plan is None:
            return
        last, step = self.plan.folder / LAST, self.trainer.global_step
        self.last_checkpoint = LastCheckpoint(last, epoch, step)
        self.reporting.checkpoint(last)
        self.report.checkpoint(
            last.resolve(),
            epoch=epoch,
            step=step,
            best=self.plan.folder / best if best is not None else None,
        )
        if self.env.rank == 0:
            note_launcher(last.resolve(), epoch=epoch, step=step)

    def _requeue(self, epoch: int) -> None:
        """Stop at the checkpoint just written: requeue the SLURM job and exit."""
        step = self.trainer.global_step
        self.log.write({"kind": "requeue", "step": step, "epoch": epoch})
        self.requeue.leave(
            rank=self.env.rank,
            world_size=self.env.world_size,
            step=step,
            checkpoint=self.plan.folder / LAST if self.plan is not None else Path(LAST),
        )

    # -- the end ------------------------------------------------------------------------------

    def _missing_kernel(self, exc: BaseException, loss: Any = None) -> MissingKernelError | None:
        """accelctl's error where ``exc`` is a kernel the device lacks (naming the layer of the
        model that called it), else None."""
        if not isinstance(exc, Exception):
            return None
        return missing_kernel_error(
            exc,
            accelerator=self.trainer.accelerator.plugin_name,
            device=self.device,
            model=self.model,
            loss=loss,
        )

    def _report_stop(self, exc: BaseException) -> None:
        """The log's line for a fit that did not finish: an error, or Ctrl-C (where no launcher
        reports it: under ``accelctl launch``, the launcher's one line names the checkpoint)."""
        if isinstance(exc, SystemExit):  # the requeue's exit: it said why
            return
        # Where it stopped: None before this fit's first step (the trainer's figures may be a
        # previous fit's, or the checkpoint's it resumed from).
        ran = self.first_step is not None and self.trainer.global_step > self.first_step
        at = (self.trainer.current_epoch, self.trainer.global_step) if ran else None
        # An error about checkpoints (or the requeue's) says itself what became of them.
        spoken = isinstance(exc, (CheckpointError, RequeueError))
        last = "" if spoken else resume_advice(self.last_checkpoint)
        if isinstance(exc, KeyboardInterrupt):
            if _settings.launcher_pid() is None:
                self.report.interrupted(at, last=last)
            return
        if isinstance(exc, AccelctlError):  # its own line says it all, but a checkpoint
            if self.last_checkpoint is not None and not spoken:
                self.report.stopped_at(at, last=last)
            return
        self.report.failed(exc, at, last=last)


def _strategy_text(strategy: str, world_size: int) -> str:
    if strategy == "auto":
        return "ddp" if world_size > 1 else "none (the model as it is)"
    return strategy


def resume_advice(last: LastCheckpoint | None) -> str:
    """``the last checkpoint is X (epoch 2, step 40): ...how to resume...``, or that none was
    written."""
    if last is None:
        return "no checkpoint was written"
    path = last.path.resolve()
    return (
        f"the last checkpoint is {path} (epoch {last.epoch + 1}, step {last.step}); resume from "
        f"it with fit(ckpt_path='last'), or by running the same command with "
        f"{_settings.CKPT_PATH}={shlex.quote(str(path))}"
    )


def note_launcher(path: Path, *, epoch: int, step: int) -> None:
    """Tell ``accelctl launch`` (through the file ``ACCELCTL_LAUNCH_NOTE`` names) where the last
    checkpoint is, for its report when it is interrupted; nothing outside a launch."""
    note = _settings.launch_note()
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

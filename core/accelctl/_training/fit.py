"""One call of :meth:`accelctl.Trainer.fit`, as an object.

The Trainer is the configuration and the results; each ``fit`` makes a :class:`Fit`, which holds
what lives for that call only: its fixed configuration (:class:`.fit_state.FitConfig`), the
process group it joined, the hang watch, the requeue handler, the logs, and what changes as it
runs (:class:`.fit_state.FitState`). Its methods are the fit's phases: set up the processes, plan
the run, set up the training (:class:`.fit_state.Training`, made whole at once), train the epochs
(:class:`.epochs.Epochs`), and finish (leave the group, tear the device down).
"""

from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .._choice.process_environment import ProcessEnvironment
from .._choice.selection import known_name
from .._contract import settings
from .._contract.errors import AccelctlError, warn_user
from .._contract.kernel_error import MissingKernelError
from .._kernels.setup import set_up_kernels
from .._kernels.translate import missing_kernel_error
from .._launching.error_line import reported, show_as_one_line
from .callbacks import Reporting
from .checkpoint import (
    Checkpointer,
    CheckpointError,
    LastCheckpoint,
    Resume,
    Stateful,
)
from .data import shard_loader
from .epochs import Epochs
from .fit_state import FitConfig, FitOwner, FitState, Training
from .fsdp import refuse_fsdp_gaps, shard_model, sharded_grad_scaler
from .hangs import HangWatch, Progress
from .metrics_log import METRICS_FILE, MetricsLog
from .model import TrainingStep, optimizer_of
from .processes import join_process_group
from .report import FitReport
from .requeue import RequeueError, RequeueOnSignal
from .rng import set_rng_state
from .runs import Identity, RunFolders, RunPlan, check_ckpt_path, without_folder
from .throughput import Throughput, peak_flops
from .timeouts import collective_timeout

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class Planned:
    """Rank 0's plan of the run, as every rank learns it."""

    #: The run folder and its name (None: checkpoints are off, no run folder).
    plan: RunPlan | None
    #: The checkpoint to load (None: from the start).
    resume_from: Path | None
    #: Rank 0's refusal (a :class:`CheckpointError`'s words), which every rank raises.
    refusal: str | None = None


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
        device = trainer.device
        autocast = trainer.precision.autocast(device)
        sharded = trainer.strategy == "fsdp"
        scaler = (
            sharded_grad_scaler(trainer.precision, device)
            if sharded
            else trainer.precision.grad_scaler(device)
        )
        given_as = "ckpt_path"
        from_environ = settings.ckpt_path() if ckpt_path is None else None
        if from_environ is not None:
            # ACCELCTL_CKPT_PATH: resume a script without editing it (the launcher's advice).
            ckpt_path, given_as = from_environ, settings.CKPT_PATH
        # A wrong path fails here, before any process group or device is set up.
        check_ckpt_path(ckpt_path, trainer.root_dir, given_as=given_as)
        self.config = FitConfig(
            device=device,
            sharded=sharded,
            autocast=autocast,
            scaler=scaler,
            ckpt_path=ckpt_path,
            # ACCELCTL_PEAK_FLOPS, read (and refused when malformed) before anything is set up.
            declared_peak=settings.declared_peak(),
            identity=Identity.from_environ(),
            timeout=collective_timeout(),
        )
        #: The human log (rank 0's lines); the metrics log writes nothing until the run is
        #: planned.
        self.report = FitReport(env.rank == 0)
        self.log = MetricsLog(None)
        #: Rank 0's run folders (its lock on the fit's folder).
        self.runs = RunFolders(trainer.root_dir, self.config.identity) if env.rank == 0 else None
        #: Where the loop is, for the hang watch's report (several processes only).
        self.progress = Progress()
        restarts = self.config.identity.restarts
        self.watch = HangWatch(env, self.progress, restarts) if env.distributed else None
        self.owns_group = False  # True once this fit created the process group
        #: What each point of the fit reports to the callbacks (the trainer's, the process's).
        self.reporting = Reporting(trainer, trainer.callbacks)
        self.state = FitState()

    def run(self, train_dataloader: Iterable[Any], val_dataloader: Iterable[Any] | None) -> None:
        """Train for the trainer's ``max_epochs`` (from the checkpoint's epoch when resumed)."""
        try:
            self.requeue.arm()
            self._set_up_processes()
            planned = self._plan_run()
            training = self._set_up_training(planned, train_dataloader, val_dataloader)
            self.state.first_step = self.trainer.global_step
            Epochs(self, training).run()
            self._leave_together()
        except BaseException as exc:  # Ctrl-C too: the stop is reported, the group ended
            missing = self._missing_kernel(exc)
            # Before the group goes: the report asks the other processes through its store.
            step = self.trainer.global_step
            explained = (
                self.watch.explain(exc, timeout=self.config.timeout, step=step)
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
            elif isinstance(exc, KeyboardInterrupt) and settings.launcher_pid() is None:
                reported(exc)  # the log's line said it: no traceback after it
            if raised is not exc:
                raise raised from exc
            raise
        self.report.finished(max_epochs=self.trainer.max_epochs, step=self.trainer.global_step)
        self._finish(quiet=False)

    # -- set-up and finish -------------------------------------------------------------------

    def _set_up_processes(self) -> None:
        """Set the device up and, with several processes, join their group.

        Then watch for hangs. FSDP2 alone: a group of one process."""
        accelerator, device = self.trainer.accelerator, self.config.device
        sharded = self.config.sharded
        accelerator.setup_device(device)
        set_up_kernels(accelerator, device, rank=self.env.rank)
        backend = accelerator.info.distributed_backend
        if sharded:  # on the device it trains on, before any group: no FSDP stack trace
            refuse_fsdp_gaps(accelerator.name, device.type, backend)
        group = None  # the number of the group this fit makes, where it makes one
        if self.watch is not None or sharded:
            assert backend is not None  # choose_device and refuse_fsdp_gaps refused None
            timeout = self.config.timeout
            group = join_process_group(backend, self.env, device, timeout)
            self.owns_group = group is not None
        if self.watch is not None:  # several processes
            self.watch.start(group)

    def _plan_run(self) -> Planned:
        """Plan the run folder and what to resume from, on rank 0, and share the plan.

        See :mod:`.runs`. Every rank learns the plan (or rank 0's refusal); then the logs are
        opened."""
        trainer, env, ckpt_path = self.trainer, self.env, self.config.ckpt_path
        planned = Planned(None, None)  # rank 0's, sent to all
        if self.runs is not None and trainer.checkpointing.enabled:
            try:
                made = self.runs.plan(ckpt_path)
                planned = Planned(made, made.resume_from)
            except CheckpointError as exc:
                planned = Planned(None, None, refusal=str(exc))
        elif self.runs is not None:  # no checkpoints, no run folder; a checkpoint still loads
            planned = Planned(None, without_folder(trainer.root_dir, ckpt_path))
        if env.world_size > 1:
            import torch.distributed as dist

            shared: list[Any] = [planned]
            dist.broadcast_object_list(shared, src=0)
            planned = shared[0]
        if planned.refusal is not None:
            raise CheckpointError(planned.refusal)
        plan = planned.plan
        trainer.run_dir = plan.folder if plan is not None else None
        # The metrics log's lines are tagged with the run (an id of its own without a folder).
        run = plan.name if plan is not None else uuid.uuid4().hex[:12]
        log_file = trainer.root_dir / METRICS_FILE if env.rank == 0 else None
        self.log = MetricsLog(log_file, run=run, restart=self.config.identity.restarts)
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
        folder = plan.folder.resolve() if plan is not None else None
        report.writing(
            run=plan.summary if plan else None,
            folder=folder,
            metrics=(trainer.root_dir / METRICS_FILE).resolve(),
            when=when,
        )
        return planned

    def _set_up_training(
        self,
        planned: Planned,
        train_dataloader: Iterable[Any],
        val_dataloader: Iterable[Any] | None,
    ) -> Training:
        """Set up the model, optimizer, checkpointer, resume state and loaders.

        FSDP2 shards the model before its optimizer is made. The resume state is loaded before
        DDP wraps the model: every rank loads the same file. The loaders are sharded."""
        model, trainer, env, config = self.model, self.trainer, self.env, self.config
        if config.sharded:
            shard_model(model, config.device, trainer.precision)
        else:
            model.to(config.device)
        optimizer = optimizer_of(model)
        plan = planned.plan
        checkpointer = Checkpointer(
            trainer.checkpointing,
            plan.folder if plan is not None else trainer.root_dir,
            Stateful(model, optimizer, config.scaler),
            env=env,
            device=config.device,
            run=plan.name if plan is not None else "",
        )
        trainer.global_step = 0
        resume = self._restore(checkpointer, planned.resume_from)
        # One process, or FSDP2 (its forward method): the model's own. Else through DDP's forward.
        training_step: Callable[[Any, int], Any] = cast(Any, model).training_step
        if env.distributed and not config.sharded:
            from torch.nn.parallel import DistributedDataParallel

            training_step = DistributedDataParallel(TrainingStep(model))
        rank, world = env.rank, env.world_size
        val_loader = None
        if val_dataloader is not None:
            val_loader = shard_loader(val_dataloader, rank=rank, world_size=world, train=False)
        peak = None
        if trainer.flops_per_sample is not None:
            peak = peak_flops(
                trainer.accelerator, config.device, trainer.precision.name, config.declared_peak
            )
        return Training(
            plan=plan,
            optimizer=optimizer,
            checkpointer=checkpointer,
            training_step=training_step,
            train_loader=shard_loader(train_dataloader, rank=rank, world_size=world, train=True),
            val_loader=val_loader,
            throughput=Throughput(trainer.flops_per_sample, peak, world),
            resume=resume,
        )

    def _restore(self, checkpointer: Checkpointer, resume_from: Path | None) -> Resume | None:
        """Load the checkpoint to resume from, if any; the trainer's step and figures are its."""
        if resume_from is None:
            return None
        resume = checkpointer.restore(resume_from)
        trainer = self.trainer
        trainer.global_step, trainer.metrics = resume.global_step, resume.metrics
        if not resume.batches_done and resume.rng is not None:
            set_rng_state(resume.rng, self.config.device)
        self.state.last_checkpoint = LastCheckpoint(resume_from, resume.epoch, resume.global_step)
        if resume.epoch >= trainer.max_epochs:
            self.report.nothing_to_train(
                resume_from, epochs_done=resume.epoch, max_epochs=trainer.max_epochs
            )
        else:
            self.report.resumed(
                resume_from,
                epoch=resume.epoch,
                batches_done=resume.batches_done,
                step=resume.global_step,
                max_epochs=trainer.max_epochs,
            )
        return resume

    def _leave_together(self) -> None:
        """Leave the process group together.

        One that leaves (and exits) while rank 0 still writes the last checkpoint can leave rank 0
        hung in destroy_process_group, pytorch/pytorch#75097
        (docs/design/leave-the-group-together.md).
        """
        if self.owns_group:
            import torch.distributed as dist

            self.progress.mark("the end of the fit", self.trainer.global_step)
            dist.barrier()

    def _finish(self, *, quiet: bool) -> None:
        """Close the fit's resources and call the accelerator's ``teardown``.

        Close the log, restore the signal's handler, stop the hang watcher, leave the process group
        this fit created. After a failure (``quiet``) a cleanup error is only warned about, so that
        the training error surfaces."""
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

    # -- the end ------------------------------------------------------------------------------

    def _missing_kernel(self, exc: BaseException, loss: Any = None) -> MissingKernelError | None:
        """Return accelctl's error where ``exc`` is a kernel the device lacks, else None.

        The error names the layer of the model that called it."""
        if not isinstance(exc, Exception):
            return None
        return missing_kernel_error(
            exc,
            accelerator=self.trainer.accelerator.plugin_name,
            device=self.config.device,
            model=self.model,
            loss=loss,
        )

    def _report_stop(self, exc: BaseException) -> None:
        """Log the line for a fit that did not finish.

        An error, or Ctrl-C (where no launcher reports it: under ``accelctl launch``, the launcher's
        one line names the checkpoint)."""
        if isinstance(exc, SystemExit):  # the requeue's exit: it said why
            return
        # Where it stopped: None before this fit's first step (the trainer's figures may be a
        # previous fit's, or the checkpoint's it resumed from).
        first_step = self.state.first_step
        ran = first_step is not None and self.trainer.global_step > first_step
        at = (self.trainer.current_epoch, self.trainer.global_step) if ran else None
        # An error about checkpoints (or the requeue's) says itself what became of them.
        error_explains_checkpoint = isinstance(exc, (CheckpointError, RequeueError))
        last = "" if error_explains_checkpoint else resume_advice(self.state.last_checkpoint)
        if isinstance(exc, KeyboardInterrupt):
            if settings.launcher_pid() is None:
                self.report.interrupted(at, last=last)
            return
        if isinstance(exc, AccelctlError):  # its own line says it all, but a checkpoint
            if self.state.last_checkpoint is not None and not error_explains_checkpoint:
                self.report.stopped_at(at, last=last)
            return
        self.report.failed(exc, at, last=last)


def _strategy_text(strategy: str, world_size: int) -> str:
    if strategy == "auto":
        return "ddp" if world_size > 1 else "none (the model as it is)"
    return strategy


def resume_advice(last: LastCheckpoint | None) -> str:
    """Say where the last checkpoint is and how to resume, or that none was written.

    ``the last checkpoint is X (epoch 2, step 40): ...how to resume...``."""
    if last is None:
        return "no checkpoint was written"
    path = last.path.resolve()
    return (
        f"the last checkpoint is {path} (epoch {last.epoch + 1}, step {last.step}); resume from "
        f"it with fit(ckpt_path='last'), or by running the same command with "
        f"{settings.CKPT_PATH}={shlex.quote(str(path))}"
    )

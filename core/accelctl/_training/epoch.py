"""One epoch of ``Trainer.fit``: its optimizer steps, the logging windows, mid-epoch checkpoints,
and stopping at a checkpoint when the requeue signal came (:mod:`.requeue`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from .._errors import AccelctlError, PluginWarning, TrainerError
from .checkpoint import CHECKPOINT_DIR, LAST
from .data import batch_size, move_to_device
from .figures import epoch_figures, reduce_window
from .hangs import Progress
from .metrics_log import MetricsLog
from .progress import progress_bar
from .requeue import RequeueOnSignal

if TYPE_CHECKING:
    from .._trainer import Trainer


def train_epoch(
    trainer: Trainer,
    epoch: int,
    training_step: Callable[[Any, int], Any],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    autocast: Any,
    loader: Iterable[Any],
    log: MetricsLog,
    *,
    batches: Iterable[tuple[int, Any]],
    every_n_steps: int | None = None,
    checkpoint: Callable[[int], None],
    requeue: RequeueOnSignal,
    progress: Progress,
) -> dict[str, float]:
    """One epoch over ``batches`` (``enumerate(loader)``, or its rest after a resume);
    ``checkpoint(batches_done)`` is called after every ``every_n_steps``-th optimizer step,
    and before leaving when ``requeue``'s signal came (agreed at a logging step)."""
    device, every = trainer.device, trainer.log_every_n_steps
    bar = None
    if trainer.is_global_zero:
        description = f"epoch {epoch + 1}/{trainer.max_epochs}"
        bar = progress_bar(
            trainer.enable_progress_bar, total=_length(loader), description=description
        )
    # Losses stay on the device until a logging step: no per-step synchronisation.
    window: list[torch.Tensor] = []
    window_samples = 0
    epoch_loss = torch.zeros((), device=device)
    epoch_steps = epoch_samples = 0
    started = window_started = time.perf_counter()
    stats_ok = True
    try:
        for batch_idx, batch in batches:
            step = trainer.global_step + 1
            progress.mark("training_step", step)
            batch = move_to_device(batch, device)
            with autocast:
                loss = training_step(batch, batch_idx)
            if not isinstance(loss, torch.Tensor):
                raise TrainerError(
                    f"training_step must return the loss as a tensor, returned "
                    f"{type(loss).__name__} (batch {batch_idx})"
                )
            optimizer.zero_grad(set_to_none=True)
            progress.mark("backward (the gradients' all-reduce)", step)
            if scaler is not None:
                scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
            window.append(loss.detach())
            samples = batch_size(batch)
            window_samples += samples
            epoch_samples += samples
            epoch_steps += 1
            trainer.global_step += 1
            if bar is not None:
                bar.update(1)
            stop = requeue.requested and not trainer._env.distributed
            if trainer.global_step % every == 0:
                progress.mark("the figures' all-reduce", step)
                window_loss, mean, count, stop = reduce_window(
                    window, window_samples, device=device, env=trainer._env, stop=requeue.requested
                )
                epoch_loss += window_loss
                now = time.perf_counter()
                record: dict[str, Any] = {
                    "kind": "step",
                    "step": trainer.global_step,
                    "epoch": epoch,
                    "train_loss": mean,
                    "samples_per_second": count / max(now - window_started, 1e-9),
                }
                if trainer.is_global_zero and stats_ok:
                    stats, stats_ok = _device_stats(trainer)
                    record.update((k, v) for k, v in stats.items() if k not in record)
                log.write(record)
                if bar is not None:
                    bar.set_postfix(loss=f"{mean:.4g}", refresh=False)
                window, window_samples, window_started = [], 0, now
            saved = every_n_steps is not None and trainer.global_step % every_n_steps == 0
            if saved or stop:
                progress.mark("a checkpoint", step)
                checkpoint(batch_idx + 1)
            if stop:
                log.write({"kind": "requeue", "step": step, "epoch": epoch})
                requeue.leave(
                    rank=trainer._env.rank,
                    world_size=trainer._env.world_size,
                    step=step,
                    checkpoint=trainer.root_dir / CHECKPOINT_DIR / LAST,
                )
            progress.mark("loading a batch", step)
        if window:
            epoch_loss += torch.stack(window).float().sum()
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - started
    return epoch_figures(
        epoch_loss, epoch_steps, epoch_samples, elapsed, device=device, env=trainer._env
    )


def _device_stats(trainer: Trainer) -> tuple[dict[str, int | float], bool]:
    """Rank 0's device stats for a log line; a hook that breaks is warned about once and not
    asked again."""
    try:
        return trainer.accelerator.device_stats(trainer.device), True
    except AccelctlError as exc:
        warnings.warn(f"device stats disabled for this fit: {exc}", PluginWarning, stacklevel=3)
        return {}, False


def _length(loader: Iterable[Any]) -> int | None:
    """Batches in ``loader`` when it knows (an iterable dataset's loader may not)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None

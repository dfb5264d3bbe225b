"""The figures a fit reports, agreed across processes.

A logging window's mean loss, an epoch's loss and throughput, validation means. Each reduction is
one all-reduce of a float32 tensor (every backend reduces it; counts stay exact below 2**24 per
call); alone, no collective at all."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._choice.process_environment import ProcessEnvironment
from .._contract.errors import TrainerError
from .data import batch_size, move_to_device


def _vector(values: list[torch.Tensor | float | int], device: torch.device) -> torch.Tensor:
    return torch.stack(
        [torch.as_tensor(value, dtype=torch.float32, device=device) for value in values]
    )


@dataclass(frozen=True)
class Window:
    """A closed logging window's figures, agreed across the processes."""

    mean_loss: float
    samples_per_second: float
    #: Whether any process asks to stop (the requeue signal).
    stop: bool


class EpochTally:
    """An epoch's training figures as its steps add up.

    The losses stay on the device until a logging window closes (no per-step synchronisation), the
    counts in Python."""

    def __init__(self, device: torch.device, env: ProcessEnvironment) -> None:
        self.device, self.env = device, env
        self.loss = torch.zeros((), device=device)  # the closed windows' loss sum
        self.steps = self.samples = 0
        self.window: list[torch.Tensor] = []
        self.window_samples = 0
        self.started = self.window_started = time.perf_counter()

    def add(self, loss: torch.Tensor, samples: int) -> None:
        """One optimizer step's loss and its batch's samples."""
        self.window.append(loss.detach())
        self.window_samples += samples
        self.samples += samples
        self.steps += 1

    def close_window(self, *, stop: bool) -> Window:
        """Close the logging window and return its figures, agreed across all processes.

        Across all processes, the window's mean loss, its samples per second and whether any
        process asks to ``stop`` (read here: a logging step syncs; the flag rides along for
        free); a new window starts."""
        local = torch.stack(self.window).float().sum()
        if self.env.distributed:
            import torch.distributed as dist

            figures = _vector(
                [local, len(self.window), self.window_samples, float(stop)], self.device
            )
            dist.all_reduce(figures)
            loss_sum, steps, samples, stops = figures.tolist()
            mean, count, stop = loss_sum / steps, int(samples), stops > 0
        else:
            mean, count = float(local) / len(self.window), self.window_samples
        self.loss += local
        now = time.perf_counter()
        rate = count / max(now - self.window_started, 1e-9)
        self.window, self.window_samples, self.window_started = [], 0, now
        return Window(mean_loss=mean, samples_per_second=rate, stop=stop)

    def figures(self) -> dict[str, float]:
        """Return the epoch's ``train_loss`` and ``samples_per_second``.

        ``train_loss``: the mean over all processes' steps; ``samples_per_second``: all
        processes' samples over the slowest one's time."""
        if self.window:
            self.loss += torch.stack(self.window).float().sum()
        steps, samples = self.steps, self.samples
        elapsed = time.perf_counter() - self.started
        if self.env.distributed:
            import torch.distributed as dist

            totals = _vector([self.loss, steps, samples], self.device)
            dist.all_reduce(totals)
            slowest = _vector([elapsed], self.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            loss_total, steps_f, samples_f = totals.tolist()
            steps, samples, elapsed = int(steps_f), int(samples_f), float(slowest)
        else:
            loss_total = float(self.loss)
        return {
            "train_loss": loss_total / steps if steps else float("nan"),
            "samples_per_second": samples / elapsed if elapsed > 0 else 0.0,
        }


def validate(
    model: nn.Module,
    autocast: Any,
    loader: Iterable[Any],
    *,
    device: torch.device,
    env: ProcessEnvironment,
) -> dict[str, float]:
    """Return sample-weighted means of ``validation_step``'s figures across processes.

    Each shard's sums are summed across processes: every sample counts once, every rank gets
    the same figures."""
    sums: dict[str, torch.Tensor] = {}
    samples = 0
    for batch_idx, batch in enumerate(loader):
        batch = move_to_device(batch, device)
        with autocast:
            output = model.validation_step(batch, batch_idx)  # type: ignore[operator]
        if output is None:
            continue
        if not isinstance(output, Mapping):
            raise TrainerError(
                f"validation_step must return a dict of figures (or None), returned "
                f"{type(output).__name__} (batch {batch_idx})"
            )
        count = batch_size(batch)
        samples += count
        for key, value in output.items():
            figure = torch.as_tensor(value, device=device).detach()
            if figure.numel() != 1:
                raise TrainerError(
                    f"validation_step's figure {key!r} must be a number or a one-element "
                    f"tensor, got shape {tuple(figure.shape)}"
                )
            weighted = figure.reshape(()).float() * count
            sums[key] = sums[key] + weighted if key in sums else weighted
    keys = sorted(sums)
    if env.distributed:
        import torch.distributed as dist

        # A process whose shard is empty knows no keys: agree on them first (once per epoch).
        gathered: list[list[str] | None] = [None] * env.world_size
        dist.all_gather_object(gathered, keys)
        keys = sorted({key for part in gathered for key in (part or [])})
        vector = _vector([sums.get(key, 0.0) for key in keys] + [samples], device)
        dist.all_reduce(vector)
        *values, total = vector.tolist()
    else:
        values = [float(sums[key]) for key in keys]
        total = float(samples)
    return {
        (key if key.startswith("val_") else f"val_{key}"): (value / total if total else 0.0)
        for key, value in zip(keys, values, strict=True)
    }

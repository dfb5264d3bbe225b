"""Inside a Ray Train worker: the Trainer's fits reported to Ray Train.

Each point where a fit wrote a line of ``metrics.jsonl`` or a checkpoint becomes one
``ray.train.report`` on every worker (Ray requires the same number of calls from each, and
every rank reports at the same points), so that ``Result.metrics``, Ray Tune and the dashboard
see the Trainer's figures; rank 0 passes the checkpoint as a ``ray.train.Checkpoint`` (Ray keeps
the metrics of rank 0 and merges the checkpoints the workers pass), so that ``Result.checkpoint``
is the Trainer's last and a new ``fit()`` of the run resumes from it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import ray.train

from accelctl._training.callbacks import TrainingReport  # the same distribution

from .checkpoints import CheckpointMeta, remove, stage

#: The prefix of the device readings among the reported metrics.
DEVICE_PREFIX = "device/"


def run_id(context: Any) -> str:
    """Return the Ray run's id, the same in every worker and at every start.

    Also the same in every ``fit()`` of the run: it is its storage and name,
    ``RunConfig(storage_path, name)``. It is the ``ACCELCTL_LAUNCH_ID`` by which a resumed fit finds
    its run folder."""
    where = ""
    get_storage = getattr(context, "get_storage", None)  # Ray's DeveloperAPI: the name suffices
    try:
        where = f"{get_storage().storage_fs_path}/" if callable(get_storage) else ""
    except Exception:
        where = ""
    name = f"{where}{context.get_experiment_name()}"
    return f"ray-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


class RayReport:
    """The Trainer's callback in a Ray Train worker (installed by the bridge's placement)."""

    def __init__(self, launch: str, restart: int, *, checkpoints: bool) -> None:
        self.launch, self.restart, self.checkpoints = launch, restart, checkpoints
        #: The figures so far (a checkpoint between two lines reports the last ones again, an
        #: epoch's ``val_*`` stay until the next epoch's).
        self.figures: dict[str, float] = {}

    def on_report(self, trainer: Any, report: TrainingReport) -> None:
        self.figures.update(report.metrics)
        metrics: dict[str, Any] = {**self.figures, "epoch": report.epoch, "step": report.step}
        metrics.update((f"{DEVICE_PREFIX}{k}", v) for k, v in report.device_stats.items())
        staged = None
        checkpoint = None
        rank0 = ray.train.get_context().get_world_rank() == 0
        if report.checkpoint is not None and self.checkpoints and rank0:
            meta = CheckpointMeta(
                launch=self.launch,
                restart=self.restart,
                file=report.checkpoint.name,
                run=report.checkpoint.parent.name,
                epoch=report.epoch,
                step=report.step,
            )
            staged = stage(report.checkpoint, meta)
            checkpoint = ray.train.Checkpoint.from_directory(str(staged))
        try:
            ray.train.report(metrics, checkpoint=checkpoint)
        finally:
            if staged is not None:
                remove(staged)

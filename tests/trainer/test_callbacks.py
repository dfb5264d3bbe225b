"""The Trainer's callbacks: a report per line or checkpoint written, a bridge's, and the refusals.

One report per point where a fit wrote a line of ``metrics.jsonl`` or a checkpoint, with what it
wrote; the process's callbacks that a bridge installs; the refusals of what cannot be a callback or
a loader, before anything is set up.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import accelctl
from accelctl._training.callbacks import (
    TrainingReport,
    add_process_callback,
    remove_process_callback,
)

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, separable


class Recorder:
    def __init__(self) -> None:
        self.reports: list[TrainingReport] = []
        self.steps_seen: list[int] = []

    def on_report(self, trainer: Any, report: TrainingReport) -> None:
        self.reports.append(report)
        self.steps_seen.append(trainer.global_step)


def lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


def fit(root: Path, callbacks: list[Any] | None, **options: Any) -> accelctl.Trainer:
    trainer = accelctl.Trainer(
        accelerator="cpu", root_dir=root, enable_progress_bar=False, callbacks=callbacks,
        **{"max_epochs": 2, "log_every_n_steps": 2, **options},
    )  # fmt: skip
    # 8 batches an epoch: lines at steps 2, 4, 6, 8, ...; checkpoints every 3 steps.
    trainer.fit(Classifier(), DataLoader(separable(64), batch_size=8, shuffle=True))
    return trainer


def test_each_line_and_checkpoint_is_reported_once_with_what_was_written(tmp_path: Path) -> None:
    recorder = Recorder()
    trainer = fit(tmp_path, [recorder], checkpoint_every_n_steps=3)
    reports = recorder.reports
    points = [(r.kind, r.step, r.checkpoint is not None, bool(r.metrics)) for r in reports]
    expected = []
    for step in range(1, 17):
        line, saved = step % 2 == 0, step % 3 == 0 or step in (8, 16)
        if line or saved:
            expected.append(("step", step, step % 3 == 0, line))
        if step in (8, 16):  # the epoch's line and its checkpoint, one point
            expected.append(("epoch", step, True, True))
    assert points == expected
    assert recorder.steps_seen == [r.step for r in reports]
    # The figures are the lines' own, the device readings rank 0's (the only rank here).
    written = [line for line in lines(tmp_path) if line["kind"] in ("step", "epoch")]
    with_lines = [r for r in reports if r.metrics]
    assert len(with_lines) == len(written)
    for report, line in zip(with_lines, written, strict=True):
        assert (report.kind, report.step, report.epoch) == (line["kind"], line["step"],
                                                            line["epoch"])  # fmt: skip
        assert all(line[name] == value for name, value in report.metrics.items())
        assert report.device_stats and set(report.metrics).isdisjoint(report.device_stats)
        if report.kind == "step":  # the line holds the readings; the epoch's line does not
            assert report.device_stats.keys() <= line.keys()
    assert reports[-1].metrics == trainer.metrics
    assert reports[-1].checkpoint == trainer.run_dir / "last.ckpt"  # type: ignore[operator]
    assert "memory_total_bytes" in reports[-1].device_stats


def test_without_checkpoints_only_the_lines_are_reported(tmp_path: Path) -> None:
    recorder = Recorder()
    fit(tmp_path, [recorder], enable_checkpointing=False, max_epochs=1)
    assert [(r.kind, r.step) for r in recorder.reports] == [
        ("step", 2), ("step", 4), ("step", 6), ("step", 8), ("epoch", 8)
    ]  # fmt: skip
    assert all(r.checkpoint is None for r in recorder.reports)


def test_a_process_callback_hears_every_fit_after_the_trainers_own(tmp_path: Path) -> None:
    order: list[str] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_report(self, trainer: Any, report: TrainingReport) -> None:
            order.append(self.name)

    bridge = Named("bridge")
    add_process_callback(bridge)
    add_process_callback(bridge)  # once only
    try:
        fit(tmp_path, [Named("own")], enable_checkpointing=False, max_epochs=1, log_every_n_steps=8)
    finally:
        remove_process_callback(bridge)
    assert order == ["own", "bridge", "own", "bridge"]  # step 8's line, then the epoch's
    fit(tmp_path / "after", None, enable_checkpointing=False, max_epochs=1)
    assert order == ["own", "bridge", "own", "bridge"]  # removed: it hears no more


def test_a_callback_that_raises_stops_the_fit(tmp_path: Path) -> None:
    class Broken:
        def on_report(self, trainer: Any, report: TrainingReport) -> None:
            raise RuntimeError("the listener is gone")

    with pytest.raises(RuntimeError, match="the listener is gone"):
        fit(tmp_path, [Broken()])


@pytest.mark.parametrize(
    ("callbacks", "shown"),
    [
        ([object()], "these have none: 0: object"),
        ([Recorder(), "print"], "these have none: 1: str"),
        ("print", "got str"),
        (Recorder(), "got Recorder"),
    ],
)
def test_what_cannot_be_a_callback_is_refused_when_the_trainer_is_made(
    callbacks: Any, shown: str
) -> None:
    with pytest.raises(TypeError, match="on_report") as raised:
        accelctl.Trainer(accelerator="cpu", callbacks=callbacks)
    assert shown in str(raised.value)


class RayDataLikeIterator:
    """Ray Data's per-worker ``DataIterator``: batches through a method, no ``__iter__``."""

    def iter_torch_batches(self, **options: Any) -> Iterator[Any]:
        yield from DataLoader(separable(16), batch_size=8)


def test_a_loader_the_trainer_cannot_iterate_is_refused_before_anything_is_set_up(
    tmp_path: Path,
) -> None:
    trainer = accelctl.Trainer(accelerator="cpu", root_dir=tmp_path, enable_progress_bar=False)
    with pytest.raises(accelctl.DataLoaderError) as raised:
        trainer.fit(Classifier(), RayDataLikeIterator())  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith("train_dataloader is a Ray Data iterator (RayDataLikeIterator)")
    assert "accelctl.integrations.ray.dataset_loader(shard, batch_size=...)" in message
    with pytest.raises(accelctl.DataLoaderError, match="val_dataloader must be an iterable"):
        trainer.fit(Classifier(), [], 42)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # no run folder, no metrics.jsonl

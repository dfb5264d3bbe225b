"""The Trainer's ``flops_per_second`` and ``mfu``.

The model's FLOPs counted once (or declared), over the step time, against the peak the plugin or the
user declares.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

import accelctl
from accelctl_cpu import CPUAccelerator

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, loaders

#: Classifier(8 -> 2) per sample: the forward's matrix product (2 * 8 * 2) and the backward's
#: weight gradient (the same again); the input needs no gradient.
CLASSIFIER_FLOPS = 4 * 8 * 2


def steps_of(root: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if line["kind"] == "step"]


def fit(root: Path, **options: Any) -> accelctl.Trainer:
    trainer = accelctl.Trainer(root_dir=root, log_every_n_steps=2, **options)
    trainer.fit(Classifier(), loaders(batch_size=32)[0])
    return trainer


def test_mfu_is_logged_on_the_cpu_with_a_declared_peak(tmp_path: Path) -> None:
    trainer = fit(tmp_path, accelerator=CPUAccelerator(peak=1e9))
    for line in steps_of(tmp_path):
        assert line["flops_per_second"] == pytest.approx(
            CLASSIFIER_FLOPS * line["samples_per_second"]
        )
        assert line["mfu"] == pytest.approx(line["flops_per_second"] / 1e9)
    metrics = trainer.metrics
    assert metrics["mfu"] == pytest.approx(metrics["flops_per_second"] / 1e9)
    assert metrics["flops_per_second"] == pytest.approx(
        CLASSIFIER_FLOPS * metrics["samples_per_second"]
    )


def test_the_users_variable_wins_over_the_plugins_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_PEAK_FLOPS", "float32=4e9,bfloat16=8e9")
    trainer = fit(tmp_path, accelerator=CPUAccelerator(peak=1e9))
    assert trainer.metrics["mfu"] == pytest.approx(trainer.metrics["flops_per_second"] / 4e9)
    trainer = fit(tmp_path / "bf16", precision="bf16-mixed")  # the bfloat16 figure
    assert trainer.metrics["mfu"] == pytest.approx(trainer.metrics["flops_per_second"] / 8e9)


def test_tf32_is_the_float32_peak_where_torch_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_PEAK_FLOPS", "float32=1e9,tf32=8e9")
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    trainer = fit(tmp_path)
    assert trainer.metrics["mfu"] == pytest.approx(trainer.metrics["flops_per_second"] / 8e9)


def test_without_a_peak_for_the_precision_there_is_flops_but_no_mfu(tmp_path: Path) -> None:
    trainer = fit(tmp_path)  # the CPU's peak is unknown
    assert "mfu" not in trainer.metrics and trainer.metrics["flops_per_second"] > 0
    only_bf16 = CPUAccelerator(peak={"flops": {"bfloat16": 1e12}})
    trainer = fit(tmp_path / "32", accelerator=only_bf16)
    assert "mfu" not in trainer.metrics
    assert all("mfu" not in line for line in steps_of(tmp_path / "32"))


def test_declared_flops_per_sample_are_used_as_given(tmp_path: Path) -> None:
    trainer = fit(tmp_path, flops_per_sample=1e6, accelerator=CPUAccelerator(peak=1e12))
    metrics = trainer.metrics
    assert metrics["flops_per_second"] == pytest.approx(1e6 * metrics["samples_per_second"])
    assert metrics["mfu"] == pytest.approx(metrics["flops_per_second"] / 1e12)


def test_none_logs_neither_figure(tmp_path: Path) -> None:
    trainer = fit(tmp_path, flops_per_sample=None, accelerator=CPUAccelerator(peak=1e12))
    assert not {"flops_per_second", "mfu"} & set(trainer.metrics)
    assert all("flops_per_second" not in line for line in steps_of(tmp_path))


@pytest.mark.parametrize("value", ["count", 0, -1.0, float("nan"), True, [1e9]])
def test_flops_per_sample_that_means_nothing_is_refused_by_name(value: Any) -> None:
    with pytest.raises(accelctl.TrainerError, match=r"flops_per_sample=.* is not accepted: give"):
        accelctl.Trainer(flops_per_sample=value)


class Recording(Classifier):
    """Notes whether a dispatch mode (the FLOP counter) watches each training step."""

    def __init__(self) -> None:
        super().__init__()
        self.watched: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.watched.append(_get_current_dispatch_mode() is not None)
        return super().training_step(batch, batch_idx)


def test_only_the_first_step_is_counted_and_counting_changes_no_weight(tmp_path: Path) -> None:
    trained = []
    for index, flops in enumerate(("auto", None)):
        torch.manual_seed(0)
        model = Recording()
        accelctl.Trainer(root_dir=tmp_path / str(index), flops_per_sample=flops).fit(
            model, loaders(batch_size=32)[0]
        )
        trained.append(model)
    counted, plain = trained
    assert counted.watched == [True] + [False] * (len(counted.watched) - 1)
    assert not any(plain.watched)
    for a, b in zip(counted.parameters(), plain.parameters(), strict=True):
        assert torch.equal(a, b)  # bit for bit: the counter only looks


class NoMatrices(Classifier):
    """A model without a matrix product: FlopCounterMode counts nothing it knows."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        return ((x * self.linear.bias.sum()) ** 2).mean()


def test_a_model_the_counter_knows_nothing_of_has_no_figure_rather_than_zero(
    tmp_path: Path,
) -> None:
    trainer = accelctl.Trainer(root_dir=tmp_path, accelerator=CPUAccelerator(peak=1e12))
    trainer.fit(NoMatrices(), loaders(batch_size=32)[0])
    assert not {"flops_per_second", "mfu"} & set(trainer.metrics)


class BrokenPeak(CPUAccelerator):
    def device_peak(self, device: Any) -> Any:
        return {"flops": {"float32": "fast"}}


def test_a_peak_hook_that_breaks_is_warned_about_and_the_fit_goes_on(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path, accelerator=BrokenPeak())
    assert "mfu" not in trainer.metrics and trainer.metrics["flops_per_second"] > 0
    messages = [str(w.message) for w in caught if issubclass(w.category, accelctl.PluginWarning)]
    assert len(messages) == 1
    assert messages[0].startswith("no mfu for this fit: accelerator 'cpu': hook device_peak()")


def test_a_malformed_peak_variable_fails_the_fit_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_PEAK_FLOPS", "lots")
    model = Recording()
    with pytest.raises(accelctl.AccelctlError, match="ACCELCTL_PEAK_FLOPS='lots' is not"):
        accelctl.Trainer(root_dir=tmp_path).fit(model, loaders(batch_size=32)[0])
    assert model.watched == []  # not one step

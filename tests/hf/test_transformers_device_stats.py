"""DeviceStatsCallback puts a plugin's device figures in a real transformers Trainer's logs.

accelctl.integrations.transformers.DeviceStatsCallback, on the CPU (a few steps of a one-layer
model): in ``trainer.state.log_history`` and in what the callbacks after it are given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import accelctl

transformers: Any = None
bridge: Any = None
AcceleratorState: Any = None
GradientState: Any = None

#: What FiguredCpu reads, whatever the device.
FIGURES = {"memory_used_bytes": 1234, "utilization_percent": 42.0, "figuredcpu.fan_rpm": 900}


@pytest.fixture(autouse=True, scope="module")
def _imported() -> None:
    # Imported when a test here runs, not when pytest collects the file (seconds of CPU).
    global transformers, bridge, AcceleratorState, GradientState
    import accelerate.state
    import transformers as imported

    from accelctl.integrations import transformers as transformers_bridge

    transformers, bridge = imported, transformers_bridge
    AcceleratorState, GradientState = (
        accelerate.state.AcceleratorState,
        accelerate.state.GradientState,
    )


@pytest.fixture(autouse=True)
def _fresh_accelerate_state(_imported: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Accelerate's state is process-wide: every test starts and ends without one."""
    for name in ("ACCELERATE_TORCH_DEVICE", "ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


class FiguredCpu(accelctl.Accelerator):
    """The CPU as a plugin with known figures; records the devices it was asked about."""

    name = "figuredcpu"
    device_type = "cpu"
    distributed_backend = "gloo"

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.asked: list[str] = []

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1

    def device_stats(self, device: Any) -> dict[str, int | float]:
        self.asked.append(str(device))
        if self.fails:
            raise RuntimeError("sensor offline")
        return dict(FIGURES)


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.linear(x), labels)}


def dataset() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=generator)
    return [{"x": row, "labels": row.sum(0, keepdim=True)} for row in x]


def options(tmp_path: Path) -> dict[str, Any]:
    """Three steps, a log line each; nothing saved or reported."""
    return {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 3,
        "per_device_train_batch_size": 4,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def recorder() -> Any:
    """Return a callback that keeps a copy of each ``logs`` it is given, placed as integrations are.

    Where ``report_to``'s integrations are: after transformers' own, before none of the user's.
    """

    class Recording(transformers.TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.seen: list[dict[str, Any]] = []

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            self.seen.append(dict(logs))

    return Recording()


def step_lines(trainer: Any) -> list[dict[str, Any]]:
    return [line for line in trainer.state.log_history if "loss" in line]


def test_add_device_stats_puts_the_figures_before_every_other_callback(tmp_path: Path) -> None:
    plugin = FiguredCpu()
    args = bridge.TrainingArguments(accelerator=plugin, **options(tmp_path))
    reporting = recorder()
    trainer = transformers.Trainer(
        Regression(), args, train_dataset=dataset(), callbacks=[reporting]
    )
    callback = bridge.add_device_stats(trainer)
    assert trainer.callback_handler.callbacks[0] is callback
    trainer.train()

    expected = {f"device/{key}": value for key, value in FIGURES.items()}
    lines = step_lines(trainer)
    assert [line["step"] for line in lines] == [1, 2, 3]
    for line in trainer.state.log_history:  # the steps' lines and the summary
        assert {key: line[key] for key in expected} == expected
    # What a reporting integration is given: the same figures, in every log.
    assert len(reporting.seen) == len(trainer.state.log_history) == 4
    assert all({key: logs[key] for key in expected} == expected for logs in reporting.seen)
    assert set(plugin.asked) == {str(args.device)} and len(plugin.asked) == 4


def test_a_callback_passed_to_the_trainer_reads_the_devices_own_plugin(tmp_path: Path) -> None:
    # transformers' own arguments: the plugin named as the device's type (the real cpu plugin).
    args = transformers.TrainingArguments(use_cpu=True, **options(tmp_path))
    callback = bridge.DeviceStatsCallback(prefix="hw.")
    trainer = transformers.Trainer(
        Regression(), args, train_dataset=dataset(), callbacks=[callback]
    )
    trainer.train()
    lines = step_lines(trainer)
    assert len(lines) == 3
    for line in lines:
        assert line["hw.memory_total_bytes"] > 0 and 0 <= line["hw.cpu_percent"] <= 100
        assert not any(key.startswith("device/") for key in line)


def test_a_plugin_that_fails_is_warned_about_once_and_training_goes_on(tmp_path: Path) -> None:
    plugin = FiguredCpu(fails=True)
    args = bridge.TrainingArguments(accelerator=plugin, **options(tmp_path))
    trainer = transformers.Trainer(Regression(), args, train_dataset=dataset())
    bridge.add_device_stats(trainer)
    with pytest.warns(accelctl.PluginWarning) as warned:
        trainer.train()
    ours = [w for w in warned if "left out of transformers' logs" in str(w.message)]
    assert len(ours) == 1 and "sensor offline" in str(ours[0].message)
    assert len(plugin.asked) == 1  # not asked again during that training
    lines = step_lines(trainer)
    assert len(lines) == 3 and not any(key.startswith("device/") for line in lines for key in line)

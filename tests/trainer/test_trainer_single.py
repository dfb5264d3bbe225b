"""accelctl.Trainer in one process on the CPU: it learns, logs, and refuses what it cannot do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import accelctl
from accelctl._contract.errors import TrainerError
from accelctl._training.precision import PrecisionError
from accelctl._training.processes import ProcessSetupError

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, loaders, separable


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_learns_on_the_cpu_and_reports_where_it_ran(tmp_path: Path) -> None:
    torch.manual_seed(0)
    train, val = loaders()
    model = Classifier()
    trainer = accelctl.Trainer(max_epochs=3, root_dir=tmp_path, log_every_n_steps=2)
    trainer.fit(model, train, val)

    assert trainer.accelerator.name == "cpu"
    assert trainer.devices == [torch.device("cpu")]
    assert trainer.device == torch.device("cpu")
    assert (trainer.global_rank, trainer.world_size) == (0, 1)
    # flops_per_second: the Linear layers' FLOPs were counted; no mfu: the CPU's peak is unknown.
    assert set(trainer.metrics) == {
        "train_loss",
        "samples_per_second",
        "val_accuracy",
        "flops_per_second",
    }
    assert all(type(value) is float for value in trainer.metrics.values())
    # The loss falls from its first logged window to the last epoch, and the model generalises.
    steps = [line for line in read_lines(tmp_path / "metrics.jsonl") if line["kind"] == "step"]
    assert trainer.metrics["train_loss"] < 0.5 * steps[0]["train_loss"]
    assert trainer.metrics["val_accuracy"] > 0.9
    assert trainer.global_step == 3 * len(train)


def test_metrics_file_has_step_and_epoch_lines(tmp_path: Path) -> None:
    train, val = loaders(batch_size=32)  # 8 steps per epoch
    trainer = accelctl.Trainer(max_epochs=2, root_dir=tmp_path / "new" / "dir", log_every_n_steps=3)
    trainer.fit(Classifier(), train, val)

    lines = read_lines(tmp_path / "new" / "dir" / "metrics.jsonl")
    steps = [line for line in lines if line["kind"] == "step"]
    epochs = [line for line in lines if line["kind"] == "epoch"]
    assert [line["step"] for line in steps] == [3, 6, 9, 12, 15]
    assert [line["epoch"] for line in steps] == [0, 0, 1, 1, 1]
    for line in steps:
        assert line["train_loss"] > 0 and line["samples_per_second"] > 0
        # the CPU plugin's device stats, under the contract's keys
        assert line["memory_total_bytes"] > 0 and "cpu_percent" in line
    assert [(line["epoch"], line["step"]) for line in epochs] == [(0, 8), (1, 16)]
    assert epochs[-1]["train_loss"] == pytest.approx(trainer.metrics["train_loss"])
    assert epochs[-1]["val_accuracy"] == pytest.approx(trainer.metrics["val_accuracy"])

    # A second fit appends its lines, under a run of its own.
    accelctl.Trainer(max_epochs=1, root_dir=tmp_path / "new" / "dir").fit(Classifier(), train)
    again = read_lines(tmp_path / "new" / "dir" / "metrics.jsonl")
    assert again[: len(lines)] == lines
    assert [line["kind"] for line in again[len(lines) :]] == ["epoch"]
    assert again[-1]["run"] != lines[0]["run"]


def test_validation_figures_are_sample_weighted(tmp_path: Path) -> None:
    """10 samples in batches of 4, 4, 2: the mean must weight the short batch by its size."""
    labels = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 1])
    val = DataLoader(TensorDataset(torch.zeros(10, 8), labels), batch_size=4)

    class Counting(Classifier):
        def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            _, y = batch
            return {"ones": (y == 1).float().mean(), "val_const": 2.0}

    trainer = accelctl.Trainer(root_dir=tmp_path)
    trainer.fit(Counting(), loaders()[0], val)
    assert trainer.metrics["val_ones"] == pytest.approx(0.6)  # an unweighted mean would be 0.67
    assert trainer.metrics["val_const"] == pytest.approx(2.0)  # already prefixed: kept as it is


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)]
)
def test_mixed_precision_autocasts_on_the_cpu(
    tmp_path: Path, precision: str, dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    model = Classifier()
    trainer = accelctl.Trainer(max_epochs=2, precision=precision, root_dir=tmp_path)
    trainer.fit(model, *loaders())
    assert set(model.step_dtypes) == {dtype}
    assert all(model.autocast_enabled)
    assert model.linear.weight.dtype == torch.float32  # weights stay in float32
    assert trainer.metrics["val_accuracy"] > 0.85
    assert not torch.is_autocast_enabled("cpu")  # left as found


def test_full_precision_does_not_autocast(tmp_path: Path) -> None:
    model = Classifier()
    accelctl.Trainer(precision=32, root_dir=tmp_path).fit(model, loaders()[0])
    assert set(model.step_dtypes) == {torch.float32}
    assert not any(model.autocast_enabled)


@pytest.mark.parametrize(
    ("precision", "suggestion"),
    [("bf16", "bf16-mixed"), ("16", "16-mixed"), ("64", None), ("16-mixd", "16-mixed")],
)
def test_unknown_precision_lists_the_accepted_ones(precision: str, suggestion: str | None) -> None:
    with pytest.raises(PrecisionError) as info:
        accelctl.Trainer(precision=precision)
    message = str(info.value)
    assert f"precision={precision!r}" in message
    assert '"32", "bf16-mixed", "16-mixed"' in message
    if suggestion:
        assert f'did you mean "{suggestion}"' in message
    else:
        assert "did you mean" not in message


@pytest.mark.parametrize(
    ("argument", "value"), [("max_epochs", 0), ("max_epochs", 1.5), ("log_every_n_steps", True)]
)
def test_bad_counts_are_refused(argument: str, value: Any) -> None:
    with pytest.raises(TrainerError, match=f"{argument}={value!r}"):
        accelctl.Trainer(**{argument: value})


def test_several_devices_outside_a_launcher_print_the_launch_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "3"])
    with pytest.raises(ProcessSetupError) as info:  # refused when the Trainer is made
        accelctl.Trainer(accelerator="cpu", devices=2, root_dir=tmp_path)
    assert "accelctl launch --accelerator cpu --devices 2 train.py --epochs 3" in str(info.value)
    assert not (tmp_path / "metrics.jsonl").exists()  # refused before any work


def test_several_devices_in_a_notebook_point_to_accelctl_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", [""])
    with pytest.raises(ProcessSetupError, match=r"accelctl\.launch\(.*accelerator='cpu'"):
        accelctl.Trainer(accelerator="cpu", devices="2")


class RecordingAccelerator(accelctl.Accelerator):
    """A CPU-backed accelerator passed as an instance; records the hooks the Trainer calls."""

    name = "recorder"
    device_type = "cpu"
    distributed_backend: str | None = "gloo"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1

    def parse_devices(self, devices: Any) -> int:
        return accelctl.parse_process_count(devices, accelerator=self.name)

    def get_parallel_devices(self, devices: int) -> list[torch.device]:
        return [torch.device("cpu")] * devices

    def device_stats(self, device: torch.device) -> dict[str, int | float]:
        self.calls.append("device_stats")
        return {"memory_used_bytes": 123}

    def setup_device(self, device: torch.device) -> None:
        self.calls.append(f"setup_device({device})")

    def teardown(self) -> None:
        self.calls.append("teardown")


class SingleProcessAccelerator(RecordingAccelerator):
    """Like MPS: no distributed backend."""

    name = "single"
    distributed_backend = None


def test_an_accelerator_instance_is_set_up_used_and_torn_down(tmp_path: Path) -> None:
    accelerator = RecordingAccelerator()
    trainer = accelctl.Trainer(accelerator=accelerator, log_every_n_steps=4, root_dir=tmp_path)
    trainer.fit(Classifier(), loaders()[0])
    assert trainer.accelerator.name == "recorder"
    assert accelerator.calls == ["setup_device(cpu)", "device_stats", "device_stats", "teardown"]
    step = read_lines(tmp_path / "metrics.jsonl")[0]
    assert step["memory_used_bytes"] == 123


def test_device_stats_that_break_are_warned_about_once_per_fit_at_the_fit_call(
    tmp_path: Path,
) -> None:
    class BrokenStats(RecordingAccelerator):
        name = "brokenstats"

        def device_stats(self, device: torch.device) -> dict[str, int | float]:
            self.calls.append("device_stats")
            raise RuntimeError("no sensor")

    accelerator = BrokenStats()
    trainer = accelctl.Trainer(
        accelerator=accelerator, max_epochs=2, log_every_n_steps=4, root_dir=tmp_path
    )
    with pytest.warns(accelctl.PluginWarning, match="device stats disabled for this fit") as seen:
        trainer.fit(Classifier(), loaders()[0])  # 8 steps an epoch: 4 logging steps
    warned = [w for w in seen if "device stats" in str(w.message)]
    assert len(warned) == 1 and warned[0].filename == __file__
    assert accelerator.calls.count("device_stats") == 1  # not asked again, next epoch neither
    steps = [line for line in read_lines(tmp_path / "metrics.jsonl") if line["kind"] == "step"]
    assert len(steps) == 4 and all(line["train_loss"] > 0 for line in steps)


def test_teardown_runs_when_training_raises(tmp_path: Path) -> None:
    class Exploding(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 2:
                raise ValueError("exploded at batch 2")
            return super().training_step(batch, batch_idx)

    accelerator = RecordingAccelerator()
    with pytest.raises(ValueError, match="exploded at batch 2"):
        accelctl.Trainer(accelerator=accelerator, root_dir=tmp_path).fit(Exploding(), loaders()[0])
    assert accelerator.calls[-1] == "teardown"


def test_a_backend_none_accelerator_refuses_several_devices(tmp_path: Path) -> None:
    with pytest.raises(ProcessSetupError, match="runs in a single process only") as info:
        accelctl.Trainer(accelerator=SingleProcessAccelerator(), devices=2)
    assert "distributed_backend is None" in str(info.value)


def test_auto_on_a_backend_none_accelerator_takes_one_device(tmp_path: Path) -> None:
    """Two devices visible, no distributed backend: "auto" is one device, and it trains."""

    class TwoVisible(SingleProcessAccelerator):
        def auto_device_count(self) -> int:
            return 2

        def parse_devices(self, devices: Any) -> list[int]:
            return accelctl.parse_indexed_devices(devices, visible=2, accelerator=self.name)

        def get_parallel_devices(self, devices: list[int]) -> list[torch.device]:
            return [torch.device("cpu") for _ in devices]

    trainer = accelctl.Trainer(accelerator=TwoVisible(), root_dir=tmp_path)
    assert trainer.devices == [torch.device("cpu")]
    trainer.fit(Classifier(), loaders()[0])
    assert trainer.metrics["train_loss"] > 0


def test_a_backend_none_accelerator_refuses_a_launcher_with_several_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # two machines, one process each
    with pytest.raises(ProcessSetupError, match="2 processes"):
        accelctl.Trainer(accelerator=SingleProcessAccelerator())


def test_a_launcher_with_other_process_count_than_devices_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ProcessSetupError, match="started 2 process"):
        accelctl.Trainer(accelerator="cpu", devices=1)
    # devices="auto" under a plain torchrun takes one device per process
    assert len(accelctl.Trainer(accelerator="cpu").devices) == 2


def test_the_launchers_variables_choose_accelerator_and_devices(
    fake_site: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.install("accelctl-twin", {"twin": "fakeplugins.good:GoodAccelerator"})
    monkeypatch.setenv("ACCELCTL_ACCELERATOR", "twin")
    monkeypatch.setenv("ACCELCTL_DEVICES", "1,")
    trainer = accelctl.Trainer()
    assert trainer.accelerator.name == "twin"
    assert trainer.devices == [torch.device("cpu")]


@pytest.mark.parametrize(
    ("step_returns", "expected"),
    [(1.5, "training_step must return the loss as a tensor, returned float")],
)
def test_a_step_that_returns_no_tensor_is_named(
    step_returns: Any, expected: str, tmp_path: Path
) -> None:
    class Bad(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return step_returns

    with pytest.raises(TrainerError, match=expected):
        accelctl.Trainer(enable_progress_bar=False, root_dir=tmp_path).fit(Bad(), loaders()[0])


def test_models_without_the_protocol_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TrainerError, match="lacks training_step, configure_optimizers"):
        accelctl.Trainer(root_dir=tmp_path).fit(torch.nn.Linear(2, 2), loaders()[0])

    class ListOptimizers(Classifier):
        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1)]

    with pytest.raises(TrainerError, match=r"one torch\.optim\.Optimizer, returned list"):
        accelctl.Trainer(root_dir=tmp_path).fit(ListOptimizers(), loaders()[0])


def test_progress_bar_only_when_asked_or_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = DataLoader(separable(64), batch_size=16)
    accelctl.Trainer(root_dir=tmp_path).fit(Classifier(), train)  # captured: not a terminal
    assert "epoch 1/1" not in capsys.readouterr().err
    accelctl.Trainer(root_dir=tmp_path, enable_progress_bar=True).fit(Classifier(), train)
    assert "epoch 1/1" in capsys.readouterr().err


def test_importing_accelctl_and_the_launch_command_imports_no_torch() -> None:
    code = (
        "import sys, accelctl, accelctl.cli.launch_cmd, accelctl._training.processes;"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

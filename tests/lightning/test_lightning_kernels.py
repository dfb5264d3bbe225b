"""The Lightning bridge's steps turn only a missing kernel into accelctl's MissingKernelError.

In this process: a strategy's steps raise :class:`accelctl.MissingKernelError` where torch's error
is a kernel the strategy's device lacks, its way to the CPU in Lightning's words; every other error
passes as it is. (On a real device without the kernel: ``test_openreg_lightning_kernels.py``.)
"""

from __future__ import annotations

import sys
from typing import Any

import lightning
import pytest
import torch

import accelctl
from accelctl._launching import error_line as _error_line
from accelctl.integrations._lightning.kernels import CPU_WAY, STEPS, TranslatedStep, translate_steps
from accelctl.integrations.lightning import LightningAccelerator

#: What torch raises where an ``*_overrideable`` operator has no kernel for the device.
TORCHS_CONVOLUTION_ERROR = (
    "convolution_overrideable not implemented. You are likely triggering this with tensor "
    "backend other than CPU/CUDA/MKLDNN"
)


@pytest.fixture(autouse=True)
def _excepthook_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a translated step installs for the script's end ends with the test."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(_error_line, "_quiet", False)
    monkeypatch.setattr(_error_line, "_carriers", [])


class NoConvolution(torch.nn.Module):
    """A layer whose kernel the device lacks: it raises what torch raises then."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(TORCHS_CONVOLUTION_ERROR)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(NoConvolution())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)  # type: ignore[no-any-return]


class StandInStrategy:
    """What a translated step reads of Lightning's strategy, on a device that is not the CPU."""

    root_device = torch.device("meta", 1)

    def __init__(self, error: Exception | None = None, global_rank: int = 0) -> None:
        self.lightning_module = Net()
        self.error, self.global_rank = error, global_rank

    def training_step(self, *args: Any) -> Any:
        if self.error is not None:
            raise self.error
        return self.lightning_module(torch.zeros(1))

    validation_step = test_step = predict_step = backward = training_step


def test_a_step_that_meets_a_missing_kernel_raises_accelctls_error_from_torchs() -> None:
    strategy = StandInStrategy()
    translate_steps(strategy, "metaacc")
    with pytest.raises(accelctl.MissingKernelError) as raised:
        strategy.training_step({"batch": 0}, 0)
    error = raised.value
    assert (error.op, error.device, error.accelerator) == ("aten::convolution", "meta:1", "metaacc")
    assert error.layer == "NoConvolution at features.0"  # its path in the LightningModule
    assert error.cpu_way == CPU_WAY == 'pass accelerator="cpu" to lightning.Trainer'
    assert f"to train on the CPU, {CPU_WAY}; " in str(error)
    assert isinstance(error.__cause__, NotImplementedError)


def test_every_other_error_passes_as_it_is() -> None:
    error = ValueError("the user's own")
    strategy = StandInStrategy(error)
    translate_steps(strategy, "metaacc")
    for name in STEPS:
        with pytest.raises(ValueError) as raised:
            getattr(strategy, name)()
        assert raised.value is error


def test_the_one_line_is_rank_0s_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """Every rank of a launch Lightning made raises it; only rank 0 writes the line."""
    strategy = StandInStrategy(global_rank=1)
    translate_steps(strategy, "metaacc")
    with pytest.raises(accelctl.MissingKernelError) as raised:
        strategy.validation_step()
    sys.excepthook(type(raised.value), raised.value, None)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("rank", [0, 1])
def test_any_accelctl_error_of_a_step_is_rank_0s_one_line(
    rank: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refusal a step raises ends the program as one line, shown by rank 0 alone, no traceback.

    Not only a missing kernel.
    """
    refusal = accelctl.AcceleratorUnavailableError("npu: the device went away; use another")
    strategy = StandInStrategy(refusal, global_rank=rank)
    translate_steps(strategy, "metaacc")
    with pytest.raises(accelctl.AcceleratorUnavailableError) as raised:
        strategy.training_step()
    assert raised.value is refusal
    sys.excepthook(type(refusal), refusal, None)
    shown = "accelctl: npu: the device went away; use another (ACCELCTL_DEBUG=1 shows the "
    shown += "traceback)\n"
    assert capsys.readouterr().err == (shown if rank == 0 else "")


def test_a_strategy_set_up_again_keeps_its_one_wrapper_of_each_step() -> None:
    strategy = StandInStrategy()
    translate_steps(strategy, "metaacc")
    first = [getattr(strategy, name) for name in STEPS]
    translate_steps(strategy, "metaacc")
    assert [getattr(strategy, name) for name in STEPS] == first
    assert all(isinstance(step, TranslatedStep) for step in first)
    assert first[0].step.__func__ is StandInStrategy.training_step


def test_a_fit_on_the_bridges_accelerator_translates_its_strategys_steps() -> None:
    class Linear(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).sum()  # type: ignore[no-any-return]

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = lightning.Trainer(
        accelerator=LightningAccelerator("cpu"),
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Linear(), torch.utils.data.DataLoader(torch.ones(4, 2), batch_size=2))
    assert trainer.global_step == 1
    for name in STEPS:
        assert isinstance(getattr(trainer.strategy, name), TranslatedStep), name

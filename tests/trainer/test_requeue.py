"""``Trainer(requeue_signal=...)`` stops at a checkpoint, requeues, resumes to the same weights.

In one process; a stand-in ``scontrol`` records the requeue. The real thing, ``sbatch`` and
``scancel --signal=USR1`` on a real cluster, is in ``tests/slurm``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelctl
from accelctl._training.requeue import RequeueError, RequeueOnSignal, parse_requeue_signal


class Net(nn.Module):
    """Sends itself ``signum`` during optimizer step ``at`` (0: never)."""

    def __init__(self, at: int = 0, signum: int = signal.SIGUSR1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 1)
        self.at, self.signum, self.steps = at, signum, 0

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        self.steps += 1
        if self.steps == self.at:
            os.kill(os.getpid(), self.signum)
        x, y = batch
        return nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def loader() -> DataLoader:
    torch.manual_seed(1)
    x = torch.randn(48, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8, shuffle=True)


def fit(root: Path, model: Net, **options: object) -> accelctl.Trainer:
    trainer = accelctl.Trainer(
        accelerator="cpu", max_epochs=3, root_dir=root, enable_progress_bar=False, **options
    )
    trainer.fit(model, loader())
    return trainer


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Make a SLURM job (42) whose ``scontrol`` only records its arguments.

    SIGTERM's handler is restored afterwards: a requeue sets SIGTERM's handler aside (SLURM stops
    the job's processes with it).
    """
    bin_dir, record = tmp_path / "bin", tmp_path / "scontrol-args"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    sigterm = signal.getsignal(signal.SIGTERM)
    yield record
    signal.signal(signal.SIGTERM, sigterm)


def test_the_signal_stops_at_a_checkpoint_requeues_and_the_requeued_job_resumes_exactly(
    tmp_path: Path, scontrol: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    whole = Net()
    fit(tmp_path / "whole", whole)
    cut = tmp_path / "cut"
    with pytest.raises(SystemExit) as leaving:
        fit(cut, Net(at=8))  # "auto" inside a SLURM job: SIGUSR1
    assert leaving.value.code == 0
    assert scontrol.read_text().split() == ["requeue", "42"]
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # the fit put the default back
    assert "accelctl: SIGUSR1 received: checkpoint written at step 8" in capsys.readouterr().err
    lines = [json.loads(line) for line in (cut / "metrics.jsonl").open()]
    assert [line for line in lines if line["kind"] == "requeue"] == [
        {"kind": "requeue", "step": 8, "epoch": 1, "run": lines[0]["run"], "restart": 0}
    ]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # what SLURM sets in the requeued job
    resumed = Net()
    trainer = fit(cut, resumed)
    assert trainer.global_step == 18
    for key, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_outside_slurm_the_run_stops_at_a_checkpoint_with_the_signals_status(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as leaving:
        fit(tmp_path, Net(at=3, signum=signal.SIGUSR2), requeue_signal="usr2")
    assert leaving.value.code == 128 + signal.SIGUSR2
    assert "not in a SLURM job, so nothing requeues it: run again with fit(ckpt_path='last')" in (
        capsys.readouterr().err
    )
    state = torch.load(tmp_path / "checkpoints" / "run-0" / "last.ckpt", weights_only=True)
    assert (state["epoch"], state["batches_done"], state["global_step"]) == (0, 3, 3)


def test_a_requeue_slurm_refuses_is_an_error_naming_the_checkpoint(
    tmp_path: Path, scontrol: Path
) -> None:
    (scontrol.parent / "bin" / "scontrol").write_text(
        "#!/bin/sh\necho 'scontrol: error: Requested operation is presently disabled' >&2\nexit 1\n"
    )
    with pytest.raises(RequeueError) as caught:
        fit(tmp_path, Net(at=2))
    assert str(caught.value) == (
        "SIGUSR1 received: checkpoint written at step 2 "
        f"({tmp_path / 'checkpoints/run-0/last.ckpt'}), but `scontrol requeue 42` failed: "
        "scontrol: error: Requested operation is presently "
        "disabled. Resume from it with fit(ckpt_path='last') in a new job (sbatch --requeue lets "
        "SLURM requeue it)"
    )


def test_auto_catches_sigusr1_only_in_a_slurm_job_and_leaves_a_handler_of_ones_own() -> None:
    assert parse_requeue_signal("auto", checkpointing=True, environ={}) == (None, False)
    in_job = {"SLURM_JOB_ID": "1"}
    assert parse_requeue_signal("auto", checkpointing=True, environ=in_job) == (
        signal.SIGUSR1,
        False,
    )
    assert parse_requeue_signal("auto", checkpointing=False, environ=in_job) == (None, False)
    previous = signal.signal(signal.SIGUSR1, lambda *args: None)
    try:
        assert not RequeueOnSignal(signal.SIGUSR1, explicit=False).armed
        assert RequeueOnSignal(signal.SIGUSR1, explicit=True).armed
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize(
    ("value", "signum"),
    [("SIGUSR1", signal.SIGUSR1), (" usr2 ", signal.SIGUSR2), (15, 15), (signal.SIGTERM, 15)],
)
def test_requeue_signal_takes_names_and_numbers(value: object, signum: int) -> None:
    assert parse_requeue_signal(value, checkpointing=True, environ={}) == (signum, True)
    assert parse_requeue_signal(None, checkpointing=True, environ={}) == (None, False)


@pytest.mark.parametrize("value", ["SIGKILL", "stop", "SIGNOPE", 0, 1.5])
def test_a_signal_that_cannot_be_caught_is_refused_with_the_accepted_forms(value: object) -> None:
    with pytest.raises(accelctl.TrainerError, match='give a name such as "SIGUSR1"'):
        accelctl.Trainer(accelerator="cpu", requeue_signal=value)


def test_a_requeue_signal_without_checkpoints_is_refused() -> None:
    with pytest.raises(accelctl.TrainerError, match="enable_checkpointing is False"):
        accelctl.Trainer(accelerator="cpu", requeue_signal="SIGUSR1", enable_checkpointing=False)

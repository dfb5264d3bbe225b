"""Checkpoints of accelctl.Trainer: written atomically, read safely, resumed bit for bit."""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

import accelctl
from accelctl._training import checkpoint as checkpoint_module
from accelctl._training.checkpoint import CheckpointError

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, separable

pytestmark = pytest.mark.slow  # every test here trains

#: The first run's folder in a root_dir (docs/training.md, "Runs and their folders").
RUN_0 = Path("checkpoints", "run-0")


def temporaries(folder: Path) -> list[str]:
    """Files a write left behind in ``folder`` (a checkpoint's or run.json's temporary)."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


class Stop(Exception):
    """Stands for a kill: the fit ends at a step, with whatever was on disk."""


class Noisy(nn.Module):
    """Uses every random source a resume must restore: dropout (torch), Python's and NumPy's."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        self.stop_at = stop_at
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps += 1
        if self.steps == self.stop_at:
            raise Stop(f"stopped at step {self.steps}")
        x, y = batch
        scale = 1.0 + 0.1 * random.random() + 0.1 * float(numpy.random.rand())
        return F.cross_entropy(self(x), y) * scale

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"loss": F.cross_entropy(self(x), y)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # momentum: optimizer state to restore, not only weights
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)


def train_loader() -> DataLoader[Any]:
    return DataLoader(separable(80), batch_size=10, shuffle=True)  # 8 steps an epoch


def val_loader() -> DataLoader[Any]:
    return DataLoader(separable(40, seed=1), batch_size=20)


def trainer(root: Path, **options: Any) -> accelctl.Trainer:
    settings = {"max_epochs": 3, "root_dir": root, "log_every_n_steps": 4, **options}
    return accelctl.Trainer(**settings)


def uninterrupted(root: Path) -> dict[str, torch.Tensor]:
    seed_everything(0)
    model = Noisy()
    trainer(root).fit(model, train_loader(), val_loader())
    return model.state_dict()


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The weights of a fit that was never stopped (computed once for the module)."""
    return uninterrupted(tmp_path_factory.mktemp("whole"))


def assert_bit_identical(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert state.keys() == expected.keys()
    for key in expected:
        assert torch.equal(state[key], expected[key]), key


@pytest.mark.parametrize("stop_at", [12, 17], ids=["mid-epoch", "after-an-epoch-end"])
def test_a_stopped_fit_resumed_from_last_ends_bit_identical(
    tmp_path: Path, stop_at: int, expected: dict[str, torch.Tensor]
) -> None:
    seed_everything(0)
    with pytest.raises(Stop):
        trainer(tmp_path / "cut", checkpoint_every_n_steps=5).fit(
            Noisy(stop_at=stop_at), train_loader(), val_loader()
        )
    saved = torch.load(tmp_path / "cut" / RUN_0 / "last.ckpt", weights_only=True)
    # every 5 steps and at epoch ends (8, 16): the last before the stop
    assert saved["global_step"] == {12: 10, 17: 16}[stop_at]

    seed_everything(1234)  # another process: other initial weights, other random states
    model = Noisy()
    resumed = trainer(tmp_path / "cut", checkpoint_every_n_steps=5)
    resumed.fit(model, train_loader(), val_loader(), ckpt_path="last")
    assert resumed.global_step == 24
    assert_bit_identical(model.state_dict(), expected)
    assert resumed.run_dir == tmp_path / "cut" / RUN_0  # "last" continues the run in its folder


def test_resuming_a_finished_fit_trains_no_more(
    tmp_path: Path, expected: dict[str, torch.Tensor]
) -> None:
    assert_bit_identical(uninterrupted(tmp_path), expected)  # the same seed, the same weights
    model = Noisy()
    again = trainer(tmp_path)
    again.fit(model, train_loader(), val_loader(), ckpt_path=tmp_path / RUN_0 / "last.ckpt")
    assert again.global_step == 24
    assert_bit_identical(model.state_dict(), expected)
    assert again.metrics["val_loss"] > 0  # the checkpoint's figures


def test_a_restarted_group_resumes_from_last_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expected: dict[str, torch.Tensor]
) -> None:
    seed_everything(0)
    with pytest.raises(Stop):
        trainer(tmp_path / "cut").fit(Noisy(stop_at=20), train_loader(), val_loader())
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # what torchrun sets after a restart
    model = Noisy()
    trainer(tmp_path / "cut").fit(model, train_loader(), val_loader())  # no ckpt_path
    assert_bit_identical(model.state_dict(), expected)
    restarts = [json.loads(line)["restart"] for line in (tmp_path / "cut" / "metrics.jsonl").open()]
    assert restarts[0] == 0 and restarts[-1] == 1


def test_without_a_restart_a_fit_starts_afresh_and_last_warns_when_missing(
    tmp_path: Path,
) -> None:
    with pytest.warns(
        UserWarning, match="no checkpoint under .* yet, training from the start"
    ) as w:
        trainer(tmp_path, enable_checkpointing=False).fit(
            Classifier(), train_loader(), ckpt_path="last"
        )
    assert w[0].filename == __file__  # where fit was called
    assert not (tmp_path / "checkpoints").exists()  # enable_checkpointing=False writes none
    first = trainer(tmp_path)
    first.fit(Classifier(), train_loader())
    second = trainer(tmp_path)
    second.fit(Classifier(), train_loader())  # ckpt_path=None: from the start
    assert second.global_step == first.global_step == 24


def test_the_warnings_of_a_resume_point_at_the_fit_call(tmp_path: Path) -> None:
    """Each warning of a resume names the line that called fit.

    A checkpoint of two processes resumed by one, into a loader with a generator of its own that the
    checkpoint's loader lacked.
    """
    seed_everything(0)
    with pytest.raises(Stop):
        trainer(tmp_path, checkpoint_every_n_steps=5).fit(
            Noisy(stop_at=7), train_loader(), val_loader()
        )
    last = tmp_path / RUN_0 / "last.ckpt"
    state = torch.load(last, weights_only=True)
    assert state["batches_done"] == 5  # mid-epoch: its data order is replayed
    state.update(rng=state["rng"] * 2, epoch_rng=state["epoch_rng"] * 2, world_size=2)
    torch.save(state, last)
    generator = torch.Generator().manual_seed(0)
    own = DataLoader(separable(80), batch_size=10, shuffle=True, generator=generator)
    with pytest.warns(UserWarning) as seen:
        trainer(tmp_path).fit(Noisy(), own, ckpt_path="last")
    about = [
        w for w in seen if "this run has 1" in str(w.message) or "of its own" in str(w.message)
    ]
    assert len(about) == 3  # the random states, the data orders, the generators
    assert {w.filename for w in about} == {__file__}


def test_checkpoints_load_with_weights_only_and_hold_the_documented_keys(tmp_path: Path) -> None:
    seed_everything(0)
    trainer(tmp_path, precision="16-mixed").fit(Noisy(), train_loader(), val_loader())
    state = torch.load(tmp_path / RUN_0 / "last.ckpt", weights_only=True)
    assert {"model", "optimizer", "scaler", "epoch", "batches_done", "global_step", "rng"} <= set(
        state
    )
    assert (state["epoch"], state["batches_done"], state["global_step"]) == (3, 0, 24)
    assert state["scaler"]["scale"] > 0  # float16 scales its loss: the scaler is saved
    assert {"torch", "python", "numpy"} <= set(state["rng"][0])


def test_a_checkpoint_that_would_run_code_is_refused_unrun(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.ckpt"
    evil.write_bytes(pickle.dumps({"format": 1, "model": Payload()}, protocol=2))
    with pytest.raises(CheckpointError, match=r"weights_only=True"):
        trainer(tmp_path).fit(Classifier(), train_loader(), ckpt_path=evil)
    assert not marker.exists()

    with pytest.raises(CheckpointError, match="is not a checkpoint file"):
        trainer(tmp_path).fit(Classifier(), train_loader(), ckpt_path=tmp_path / "missing.ckpt")


def test_checkpoints_are_replaced_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer(tmp_path, enable_progress_bar=False).fit(Classifier(), train_loader())
    last = tmp_path / RUN_0 / "last.ckpt"
    before = last.read_bytes()

    def torn(obj: Any, file: Any) -> None:
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint .*last\.ckpt: disk full"):
        trainer(tmp_path, max_epochs=4).fit(Classifier(), train_loader(), ckpt_path="last")
    assert last.read_bytes() == before  # the previous checkpoint is whole
    assert temporaries(last.parent) == []


def test_keep_best_keeps_the_best_n_epoch_ends(tmp_path: Path) -> None:
    model = Classifier(lr=0.05)
    fit = trainer(tmp_path, keep_best=2, best_metric="val_accuracy", best_mode="max")
    scores = []

    def on_epoch_end(t: accelctl.Trainer) -> None:
        scores.append(t.metrics["val_accuracy"])

    model.on_epoch_end = on_epoch_end  # type: ignore[method-assign,assignment]
    fit.fit(model, train_loader(), val_loader())
    kept = sorted(p.name for p in (tmp_path / RUN_0).glob("best-*.ckpt"))
    assert len(kept) == 2
    best_two = sorted(range(3), key=lambda epoch: -scores[epoch])[:2]
    assert sorted(int(name.split("=")[1].split("-")[0]) for name in kept) == sorted(best_two)

    with pytest.raises(CheckpointError, match=r"best_metric='val_loss'.*val_accuracy"):
        trainer(tmp_path / "b", keep_best=1).fit(Classifier(), train_loader(), val_loader())


def test_checkpoint_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(accelctl.TrainerError, match="checkpoint_every_n_steps=0"):
        trainer(tmp_path, checkpoint_every_n_steps=0)
    with pytest.raises(accelctl.TrainerError, match="best_mode='best'"):
        trainer(tmp_path, best_mode="best")


def test_metrics_are_appended_with_their_run_and_restart(tmp_path: Path) -> None:
    for _ in range(2):
        trainer(tmp_path).fit(Classifier(), train_loader())
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    runs = list(dict.fromkeys(line["run"] for line in lines))
    assert len(runs) == 2 and len(lines) == 2 * (6 + 3)  # steps 4, 8, ..., 24 and 3 epoch ends
    assert {line["restart"] for line in lines} == {0}


def test_a_torn_last_line_does_not_swallow_the_next(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"kind": "step", "st')  # a crash mid-line
    trainer(tmp_path).fit(Classifier(), train_loader())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert lines[0] == '{"kind": "step", "st'
    assert all(json.loads(line)["run"] for line in lines[1:])


def test_the_module_has_no_numpy_dependency_at_import() -> None:
    # rng_state imports NumPy inside the function: the Trainer runs without it.
    assert "numpy" not in checkpoint_module.__dict__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = checkpoint_module.rng_state(torch.device("cpu"))
    assert isinstance(state["torch"], torch.Tensor)


def test_a_checkpoint_that_cannot_be_written_names_the_file_and_keeps_the_last_good_one(
    tmp_path: Path,
) -> None:
    """The file-size limit of a job (``ulimit -f``), hit at the second epoch's checkpoint."""
    import resource

    last = tmp_path / RUN_0 / "last.ckpt"
    model = Classifier()
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)

    def on_epoch_end(t: accelctl.Trainer) -> None:
        if t.current_epoch == 1:  # epoch 0's checkpoint is on disk: smaller files only now
            resource.setrlimit(resource.RLIMIT_FSIZE, (1024, limits[1]))

    model.on_epoch_end = on_epoch_end  # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(CheckpointError) as caught:
            trainer(tmp_path, enable_progress_bar=False).fit(model, train_loader())
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)  # the test process's own, again
    message = str(caught.value)
    assert message.startswith(
        f"cannot write checkpoint {last}: File too large (a file-size limit of 1024 "
    )
    assert "the last good one, written 20" in message and f"is intact at {last}" in message
    assert message.endswith("then resume with fit(ckpt_path='last')")
    state = torch.load(last, weights_only=True)  # whole, and the first epoch's
    assert (state["epoch"], state["global_step"]) == (1, 8)
    assert temporaries(last.parent) == []


def test_resuming_from_a_checkpoint_of_another_model_names_the_parameters(tmp_path: Path) -> None:
    trainer(tmp_path, enable_progress_bar=False).fit(Classifier(), train_loader())

    class Wider(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 3)
            self.extra = nn.Linear(3, 3)

    with pytest.raises(CheckpointError) as caught:
        trainer(tmp_path, enable_progress_bar=False).fit(Wider(), train_loader(), ckpt_path="last")
    message = str(caught.value)
    assert message.startswith(f"checkpoint {tmp_path / RUN_0 / 'last.ckpt'} was written ")
    assert message.split(" was written for another model: ")[1].startswith(
        "linear.weight is [2, 8] in the checkpoint, [3, 8] in the model; linear.bias is [2] in "
        "the checkpoint, [3] in the model; missing from the checkpoint: extra.bias, extra.weight."
    )
    assert message.endswith(
        "Resume with the model it was trained with, or start a new run (ckpt_path=None)"
    )


class _Generator:
    """A device module's random-state functions, recording what was restored."""

    def __init__(self) -> None:
        self.restored: list[torch.Tensor] = []

    def get_rng_state(self, index: int) -> torch.Tensor:
        return torch.arange(4, dtype=torch.uint8)

    def set_rng_state(self, state: torch.Tensor, index: int) -> None:
        self.restored.append(state)


def test_a_devices_random_state_is_restored_only_on_its_own_device_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A checkpoint written on one accelerator, resumed on another (XPU -> CUDA, openreg -> CUDA):
    # each device type's generator keeps its state in a form of its own, so another type's is
    # never set.
    from accelctl._training import rng

    generator = _Generator()
    monkeypatch.setattr(rng, "_device_module", lambda device: generator)
    saved = rng.rng_state(torch.device("xpu", 0))
    assert saved["device_type"] == "xpu"
    rng.set_rng_state(saved, torch.device("cuda", 0))
    assert generator.restored == []
    rng.set_rng_state(saved, torch.device("xpu", 1))
    assert [state.tolist() for state in generator.restored] == [[0, 1, 2, 3]]
    # A checkpoint of an earlier accelctl names no device type: its own, as before.
    del saved["device_type"]
    rng.set_rng_state(saved, torch.device("cuda", 0))
    assert len(generator.restored) == 2

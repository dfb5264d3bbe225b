"""``Trainer(strategy="fsdp")``: FSDP2 on 2 CPU processes against a hand-written loop, and more.

Against a hand-written ``fully_shard`` loop; sharded checkpoints that resume bit for bit and load
into one process; and the refusals.

The multi-process tests read one launch of 2 processes (``fsdp_run.py``), made once per session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fakeaccelerators import MetaAccelerator
from rankresults import assert_equal, report, weights
from sharedrun import shared_run
from torch.utils.data import DataLoader

import accelctl
from accelctl._contract.errors import ProcessSetupError, TrainerError
from accelctl._training.checkpoint import CheckpointError

sys.path.insert(0, str(Path(__file__).parent))
from fsdp_run import EPOCHS, STOP_AT, Net, dataset
from trainer_models import Classifier, loaders

SCRIPT = Path(__file__).with_name("fsdp_run.py")
RUNS = "hand,whole,cut,resumed,bf16,fp16,val"
#: A hang guard only: two processes import torch and train a few steps six times (a minute or
#: more on a loaded 2-core machine); nothing here is timed.
LAUNCH_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def launch(out: Path) -> None:
        env = {
            key: value
            for key, value in os.environ.items()
            if key == "ACCELCTL_HOOK_TIMEOUT" or not key.startswith("ACCELCTL_")
        }
        command = [sys.executable, "-m", "accelctl", "launch", "--cpu", "--devices", "2"]
        done = subprocess.run(
            [*command, str(SCRIPT), str(out), RUNS],
            env=env,
            capture_output=True,
            text=True,
            timeout=LAUNCH_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]

    return shared_run(tmp_path_factory, "trainer-fsdp", launch)


def local_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Return a model's weights after a fit in one process, sharded or not.

    A 1-process mesh's shard is the whole tensor: no collective needed, the fit's group is gone.
    """
    from torch.distributed.tensor import DTensor

    return {
        key: (value.to_local() if isinstance(value, DTensor) else value).detach().cpu()
        for key, value in model.state_dict().items()
    }


# -- 2 processes ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_fsdp_fit_ends_with_the_weights_of_a_hand_written_fully_shard_loop(runs: Path) -> None:
    assert_equal(weights(runs, "whole", 0), weights(runs, "hand", 0))
    assert_equal(weights(runs, "whole", 0), weights(runs, "whole", 1))
    seen = report(runs, "whole", 1)
    assert (seen["device"], seen["world_size"], seen["global_step"]) == ("cpu", 2, 4 * EPOCHS)


@pytest.mark.slow
def test_a_stopped_fsdp_fit_resumed_from_its_sharded_checkpoint_ends_bit_identical(
    runs: Path,
) -> None:
    assert report(runs, "cut", 0)["stopped"] == f"stopped at step {STOP_AT}"
    for rank in (0, 1):
        assert_equal(weights(runs, "resumed", rank), weights(runs, "whole", 0))


@pytest.mark.slow
def test_a_sharded_checkpoint_is_a_file_naming_one_folder_of_every_ranks_shards(
    runs: Path,
) -> None:
    folder = runs / "whole" / "checkpoints" / "run-0"
    last = torch.load(folder / "last.ckpt", weights_only=True)
    assert (last["format"], last["strategy"], last["world_size"]) == (2, "fsdp", 2)
    assert (last["epoch"], last["global_step"]) == (EPOCHS, 4 * EPOCHS)
    assert "model" not in last and "optimizer" not in last
    shards = folder / last["shards"]
    assert shards.parent == folder / "last.shards"
    assert sorted(p.name for p in shards.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    # written at steps 4, 5, 8, 10 and 12: the older folders are gone
    assert [p.name for p in shards.parent.iterdir()] == [shards.name]


@pytest.mark.slow
def test_a_sharded_checkpoint_loads_into_one_process_sharded_or_not(
    runs: Path, tmp_path: Path
) -> None:
    last = runs / "whole" / "checkpoints" / "run-0" / "last.ckpt"
    expected = weights(runs, "whole", 0)
    train = DataLoader(dataset(), batch_size=10, shuffle=True)
    for strategy in ("fsdp", "auto"):
        model = Net()
        trainer = accelctl.Trainer(
            accelerator="cpu", strategy=strategy, max_epochs=EPOCHS, root_dir=tmp_path / strategy
        )
        with pytest.warns(UserWarning, match=r"come from 2 process\(es\), this run has 1"):
            trainer.fit(model, train, ckpt_path=last)  # finished: trains no more
        assert trainer.global_step == 4 * EPOCHS
        assert_equal(local_weights(model), expected)


@pytest.mark.slow
def test_torchs_dcp_to_torch_save_consolidates_a_sharded_checkpoint(
    runs: Path, tmp_path: Path
) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder = runs / "whole" / "checkpoints" / "run-0"
    shards = folder / torch.load(folder / "last.ckpt", weights_only=True)["shards"]
    dcp_to_torch_save(shards, tmp_path / "whole.pt")
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    assert_equal(whole["model"], weights(runs, "whole", 0))
    assert set(whole["optimizer"]["state"]) == set(whole["model"])  # momentum, whole


@pytest.mark.slow
def test_mixed_precision_gathers_parameters_in_the_low_precision(runs: Path) -> None:
    for run, dtype in (("bf16", "torch.bfloat16"), ("fp16", "torch.float16")):
        for rank in (0, 1):
            seen = report(runs, run, rank)
            assert seen["dtypes"] == [dtype]
            assert torch.isfinite(torch.tensor(seen["metrics"]["train_loss"]))
        assert_equal(weights(runs, run, 0), weights(runs, run, 1))
        assert all(value.dtype == torch.float32 for value in weights(runs, run, 0).values())


@pytest.mark.slow
def test_validation_runs_in_lockstep_over_shards_of_unequal_batches(runs: Path) -> None:
    # Rank 0's shard has 3 batches, rank 1's 2: rank 1 runs its last batch again meanwhile,
    # its figures dropped (every forward is collective under FSDP2).
    model = Net()
    model.load_state_dict(weights(runs, "val", 0))
    model.eval()
    x, y = dataset(45, seed=1).tensors
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(x), y).item()
    for rank in (0, 1):
        assert report(runs, "val", rank)["metrics"]["val_loss"] == pytest.approx(expected, 1e-5)


# -- one process ------------------------------------------------------------------------------


def fit_classifier(
    root: Path, strategy: str, ckpt_path: str | None = None, **options: Any
) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Classifier()
    trainer = accelctl.Trainer(
        accelerator="cpu", strategy=strategy, root_dir=root, enable_progress_bar=False, **options
    )
    trainer.fit(model, *loaders(), ckpt_path=ckpt_path)
    return local_weights(model)


@pytest.mark.slow
def test_fsdp_in_one_process_trains_as_the_model_alone(tmp_path: Path) -> None:
    sharded = fit_classifier(tmp_path / "fsdp", "fsdp", max_epochs=2)
    assert_equal(sharded, fit_classifier(tmp_path / "plain", "auto", max_epochs=2))
    shards = tmp_path / "fsdp" / "checkpoints" / "run-0" / "last.shards"
    assert len(list(shards.iterdir())) == 1  # the first epoch's folder is gone


@pytest.mark.slow
def test_sharded_best_checkpoints_keep_their_own_shards(tmp_path: Path) -> None:
    fit_classifier(tmp_path, "fsdp", max_epochs=3, keep_best=1, best_metric="val_accuracy",
                   best_mode="max")  # fmt: skip
    folder = tmp_path / "checkpoints" / "run-0"
    (best,) = folder.glob("best-*.ckpt")
    state = torch.load(best, weights_only=True)
    assert (folder / state["shards"] / ".metadata").is_file()
    stems = {
        p.name.removesuffix(".ckpt").removesuffix(".shards")
        for p in folder.iterdir()
        if p.name.endswith((".ckpt", ".shards"))  # not run.json and the lock
    }
    assert stems == {"last", best.name.removesuffix(".ckpt")}  # dropped ones' shards removed


@pytest.mark.slow
def test_a_sharded_checkpoint_without_its_shards_is_refused_naming_both(tmp_path: Path) -> None:
    fit_classifier(tmp_path, "fsdp", max_epochs=1)
    last = tmp_path / "checkpoints" / "run-0" / "last.ckpt"
    moved = tmp_path / "elsewhere.ckpt"
    last.rename(moved)
    with pytest.raises(CheckpointError, match=r"its shards are missing: .*keep them together"):
        accelctl.Trainer(accelerator="cpu", strategy="fsdp", root_dir=tmp_path / "again").fit(
            Classifier(), *loaders(), ckpt_path=moved
        )


@pytest.mark.slow
def test_a_cut_write_of_shards_leaves_the_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.distributed.checkpoint import state_dict_saver
    from torch.distributed.checkpoint.api import CheckpointException

    before = fit_classifier(tmp_path, "fsdp", max_epochs=1)
    last = tmp_path / "checkpoints" / "run-0" / "last.ckpt"
    pointer = last.read_bytes()

    def cut(state: Any, *, storage_writer: Any) -> None:
        folder = Path(storage_writer.path)
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"half a shard")
        raise CheckpointException("save", {0: OSError(28, "No space left on device")})

    with monkeypatch.context() as patched:
        patched.setattr(state_dict_saver, "save", cut)
        with pytest.raises(CheckpointError, match=r"last\.ckpt: No space left on device .*intact"):
            fit_classifier(tmp_path, "fsdp", "last", max_epochs=2)  # continues run-0: epoch 2
    assert last.read_bytes() == pointer
    assert len(list((last.parent / "last.shards").iterdir())) == 2  # the cut one too
    torch.manual_seed(5)
    model = Classifier()
    trainer = accelctl.Trainer(accelerator="cpu", strategy="fsdp", max_epochs=1, root_dir=tmp_path)
    trainer.fit(model, *loaders(), ckpt_path="last")  # the last good one: trains no more
    assert_equal(local_weights(model), before)


@pytest.mark.slow
def test_fsdp_resumes_only_from_sharded_checkpoints(tmp_path: Path) -> None:
    fit_classifier(tmp_path, "auto", max_epochs=1)
    with pytest.raises(CheckpointError, match="holds the whole model in one file"):
        accelctl.Trainer(accelerator="cpu", strategy="fsdp", root_dir=tmp_path).fit(
            Classifier(), *loaders(), ckpt_path="last"
        )


def test_strategy_is_checked_when_the_trainer_is_made() -> None:
    assert accelctl.Trainer(accelerator="cpu", strategy=" FSDP ").strategy == "fsdp"
    assert accelctl.Trainer(accelerator="cpu").strategy == "auto"
    with pytest.raises(TrainerError, match=r"strategy='fsdp2' is not accepted \(did you mean "):
        accelctl.Trainer(accelerator="cpu", strategy="fsdp2")
    with pytest.raises(TrainerError, match=r'Accepted: "auto": .*; "ddp": .*; "fsdp": '):
        accelctl.Trainer(accelerator="cpu", strategy=None)  # type: ignore[arg-type]


def test_fsdp_on_a_device_that_lacks_its_needs_is_refused_before_any_launch() -> None:
    # Several devices outside a launcher would print the `accelctl launch` command: a device
    # that cannot run FSDP2 is refused first, so that nothing is launched for nothing.
    with pytest.raises(ProcessSetupError) as refused:
        accelctl.Trainer(accelerator=MetaAccelerator("gloo"), devices=2, strategy="fsdp")
    message = str(refused.value)
    assert message.startswith("strategy='fsdp' cannot run on 'metaacc' (device type 'meta'")
    assert "device-streams (torch has no module torch.meta" in message
    assert "accelctl launch --" not in message


def test_fsdp_on_one_device_that_lacks_its_needs_is_refused_once_fit_set_it_up() -> None:
    accelerator = MetaAccelerator("gloo")
    trainer = accelctl.Trainer(accelerator=accelerator, devices=1, strategy="fsdp")
    with pytest.raises(ProcessSetupError, match=r"cannot run on 'metaacc' .*device-streams \("):
        trainer.fit(Classifier(), loaders()[0])
    assert accelerator.set_up == ["meta:0"]  # probed on the device it would train on


def test_fsdp_needs_a_distributed_backend_even_in_one_process() -> None:
    with pytest.raises(ProcessSetupError, match=r"needs a torch\.distributed backend"):
        accelctl.Trainer(accelerator=MetaAccelerator(), devices=1, strategy="fsdp")


def test_fsdp_modules_chooses_the_units_and_must_name_submodules() -> None:
    from torch import nn

    from accelctl._training.fsdp import sharding_units

    net = Net()
    assert sharding_units(net) == [net.embed, *net.blocks, net.head]  # a ModuleList's items

    class Chosen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.outer = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))

        def fsdp_modules(self) -> list[nn.Module]:
            return [self.outer, self.outer[0]]

    chosen = Chosen()
    assert sharding_units(chosen) == [chosen.outer[0], chosen.outer]  # inner ones first
    chosen.fsdp_modules = lambda: [nn.Linear(1, 1)]  # type: ignore[method-assign]
    with pytest.raises(TrainerError, match=r"must return submodules of the model"):
        sharding_units(chosen)

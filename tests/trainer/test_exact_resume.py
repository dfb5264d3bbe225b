"""Exact resume from every checkpoint the Trainer writes, for every loader the docs allow.

An epoch's end, mid-epoch, on the requeue signal; in one process and in two, with and without FSDP:
the resumed fit ends with the weights of the fit that never stopped, bit for bit on the CPU
(docs/training.md, "Checkpoints and resuming").
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset

import accelctl

sys.path.insert(0, str(Path(__file__).parent))
from resume_cases import (
    EPOCHS,
    EVERY,
    LOADERS,
    Case,
    differences,
    make_loader,
    resume_point,
    steps_per_epoch,
    stopped_and_resumed,
    uninterrupted,
)

pytestmark = pytest.mark.slow  # every test here trains

SCRIPT = Path(__file__).with_name("resume_run.py")
#: A hang guard only: two processes train a few dozen short fits (minutes on a loaded 2-core
#: machine); nothing here is timed.
LAUNCH_TIMEOUT_S = 900


@pytest.fixture(scope="module", autouse=True)
def hypothesis_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep hypothesis's own files in a folder of the tests', not in the working directory.

    Its cache of constants, even without a database.
    """
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Any]:
    """Return the final weights of a loader's uninterrupted fit (FSDP or not).

    Each computed once for the module.
    """
    done: dict[tuple[str, bool], dict[str, torch.Tensor]] = {}

    def weights(loader: str, fsdp: bool) -> dict[str, torch.Tensor]:
        if (loader, fsdp) not in done:
            root = tmp_path_factory.mktemp(f"whole-{loader}-{'fsdp' if fsdp else 'plain'}")
            done[loader, fsdp] = uninterrupted(loader, fsdp, root)
        return done[loader, fsdp]

    return weights


def check(case: Case, root: Path, expected: Callable[[str, bool], Any]) -> None:
    weights, point = stopped_and_resumed(case, root)
    assert point is not None and point["global_step"] == resume_point(case), (case, point)
    assert differences(weights, expected(case.loader, case.fsdp)) == [], (case, point)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(("stop", "at"), [("epoch-end", 1), ("step", 11), ("signal", 13)])
def test_a_resumed_fit_ends_bit_identical_whatever_its_loader_and_checkpoint(
    tmp_path: Path, loader: str, stop: str, at: int, expected: Callable[[str, bool], Any]
) -> None:
    # epoch-end: the default checkpoint, after epoch 1 of 3; step: every 3 steps, the last
    # at step 9 (mid-epoch 2); signal: the requeue signal at step 13, written there.
    check(Case(loader, stop, at), tmp_path, expected)


@pytest.mark.parametrize("stop", ["epoch-end", "step"])
def test_a_one_process_fsdp_fit_with_its_loaders_generator_resumes_bit_identical(
    tmp_path: Path, stop: str, expected: Callable[[str, bool], Any]
) -> None:
    check(Case("generator", stop, 1 if stop == "epoch-end" else 11, fsdp=True), tmp_path, expected)


@st.composite
def cases(draw: st.DrawFn, fsdp: bool) -> Case:
    stop = draw(st.sampled_from(["step", "epoch-end", "signal"]))
    total = EPOCHS * steps_per_epoch()
    at = {
        "epoch-end": st.integers(1, EPOCHS - 1),
        "step": st.integers(EVERY + 1, total),  # a checkpoint before the stop
        "signal": st.integers(1, total),
    }[stop]
    return Case(draw(st.sampled_from(LOADERS)), stop, draw(at), fsdp)


@pytest.mark.parametrize("fsdp", [False, True], ids=["plain", "fsdp"])
def test_property_any_stop_and_loader_resumes_to_the_uninterrupted_weights(
    tmp_path_factory: pytest.TempPathFactory, fsdp: bool, expected: Callable[[str, bool], Any]
) -> None:
    """Item of the property: random stop points and loaders, one process (two: below)."""

    @settings(
        max_examples=8,
        deadline=None,  # fits of a loaded machine take what they take
        database=None,  # nothing written outside the test's folders
        derandomize=True,  # the same examples on every run: a failure is reproducible
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(cases(fsdp))
    @example(Case("generator", "signal", 8 * EPOCHS, fsdp))  # at the very last step
    @example(Case("stateful", "epoch-end", 2, fsdp))  # the default checkpoint, own order
    def resumes_exactly(case: Case) -> None:
        check(case, tmp_path_factory.mktemp("case"), expected)
        ran.append(case)

    ran: list[Case] = []
    resumes_exactly()
    assert len(ran) >= 8, ran  # the explicit examples and those drawn


@pytest.mark.parametrize("fsdp", [False, True], ids=["ddp", "fsdp"])
def test_property_two_processes_resume_to_the_uninterrupted_weights(
    tmp_path: Path, fsdp: bool
) -> None:
    """The resume property holds on 2 processes under ``accelctl launch``.

    ``resume_run.py`` draws the same examples in both, and fails the launch on a difference.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELCTL_")}
    env.pop("SLURM_JOB_ID", None)  # the requeue signal stops the fit, requeues nothing
    env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(tmp_path / "hypothesis")  # not the working dir
    command = [sys.executable, "-m", "accelctl", "launch", "--cpu", "--devices", "2"]
    done = subprocess.run(
        [*command, str(SCRIPT), str(tmp_path), "fsdp" if fsdp else "ddp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    checked = (tmp_path / "checked.txt").read_text().splitlines()
    assert len(checked) >= 6, checked  # the explicit examples, and the drawn ones
    assert {line.split()[1] for line in checked} == {"step", "epoch-end", "signal"}


# -- loaders whose order cannot be restored ----------------------------------------------------


class Stream(IterableDataset[Any]):
    """An iterable dataset without a state: its order could come from anywhere."""

    def __iter__(self) -> Iterator[Any]:
        data = make_loader("shuffle").dataset
        for index in torch.randperm(len(data)).tolist():  # type: ignore[arg-type]
            yield data[index]


def test_a_loader_whose_order_cannot_be_saved_is_named_once_when_written_and_at_resume(
    tmp_path: Path,
) -> None:
    trainer = Case("shuffle", "step", 0).trainer(tmp_path)
    with pytest.warns(UserWarning, match="cannot restore the order of its training data") as seen:
        trainer.fit(_net(), DataLoader(Stream(), batch_size=10))
    gaps = [w for w in seen if "cannot restore the order" in str(w.message)]
    assert len(gaps) == 1  # once a fit, not at each of its checkpoints
    message = str(gaps[0].message)
    assert "IterableDataset (Stream) without state_dict() and load_state_dict()" in message
    assert str(tmp_path / "checkpoints" / "run-0" / "last.ckpt") in message
    assert gaps[0].filename == __file__  # where fit was called

    again = Case("shuffle", "step", 0).trainer(tmp_path)
    again.max_epochs = EPOCHS + 1
    with pytest.warns(UserWarning) as seen:
        again.fit(_net(), DataLoader(Stream(), batch_size=10), ckpt_path="last")
    said = [str(w.message) for w in seen]
    assert any(m.startswith("resuming into a data order that may differ") for m in said), said


def test_an_iterator_as_loader_is_named_as_read_once(tmp_path: Path) -> None:
    trainer = accelctl.Trainer(max_epochs=1, root_dir=tmp_path, enable_progress_bar=False)
    batches = iter(list(make_loader("shuffle")))
    with pytest.warns(UserWarning, match=r"is an iterator \(list_iterator\), which is read once"):
        trainer.fit(_net(), batches)


def test_a_loader_of_a_sequence_or_a_stateful_dataset_warns_nothing(tmp_path: Path) -> None:
    trainer = Case("shuffle", "step", 0).trainer(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.fit(_net(), list(make_loader("shuffle")))


def _net() -> Any:
    from resume_cases import Net

    return Net()


def test_a_batch_samplers_sampler_is_told_the_epoch(tmp_path: Path) -> None:
    from resume_cases import EpochSampler
    from torch.utils.data import BatchSampler

    from accelctl._training.data import set_epoch

    inner = EpochSampler(80)
    loader = DataLoader(
        make_loader("shuffle").dataset, batch_sampler=BatchSampler(inner, 10, False)
    )
    set_epoch(loader, 3)
    assert inner.epoch == 3

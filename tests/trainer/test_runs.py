"""Runs that never overwrite each other, and a log a person can read (issue 35, items 1 and 2).

Every fit writes into a run folder of its own under ``<root_dir>/checkpoints``; ``"last"``, a
run's own ``last.ckpt`` and a restart of its launch continue a run, refused while another fit
writes it; rank 0 logs what it runs on, its epochs, checkpoints and why it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import accelctl
from accelctl._training.checkpoint import CheckpointError
from accelctl._training.runs import Identity, newest_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, separable

pytestmark = pytest.mark.slow  # every test here trains

SCRIPT = Path(__file__).parent / "runs_script.py"
#: Hang guard for one script's run (an interpreter, torch's import, a few epochs; a launch's
#: rendezvous), on a loaded 2-core machine.
RUN_TIMEOUT_S = 240
#: 256 samples in batches of 32: optimizer steps in an epoch of one process.
STEPS = 8


class Stop(Exception):
    """Stands for a kill at a step."""


class Stopping(Classifier):
    def __init__(self, stop_at: int | None = None, interrupt: bool = False) -> None:
        super().__init__()
        self.stop_at, self.interrupt, self.steps = stop_at, interrupt, 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps += 1
        if self.steps == self.stop_at:
            raise KeyboardInterrupt if self.interrupt else Stop(f"stopped at step {self.steps}")
        return super().training_step(batch, batch_idx)


def loader() -> DataLoader[Any]:
    return DataLoader(separable(256), batch_size=32, shuffle=True)


def fitted(
    root: Path,
    epochs: int,
    make: Callable[[], Classifier] = Classifier,
    strategy: str = "auto",
    **options: Any,
) -> tuple[accelctl.Trainer, Classifier]:
    """A fit of ``make()``'s model, made after seeding: every fit starts from the same weights."""
    torch.manual_seed(0)
    model = make()
    trainer = accelctl.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        root_dir=root,
        enable_progress_bar=False,
        strategy=strategy,
    )
    trainer.fit(model, loader(), **options)
    return trainer, model


def fit(root: Path, epochs: int, make: Callable[[], Classifier] = Classifier, **options: Any
        ) -> accelctl.Trainer:  # fmt: skip
    return fitted(root, epochs, make, **options)[0]


def saved_step(path: Path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def metrics(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(autouse=True)
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the launch it stands for; none is inherited."""
    for name in list(os.environ):
        if name.startswith(("ACCELCTL_", "TORCHELASTIC_", "SLURM_")):
            monkeypatch.delenv(name)


# -- run folders -------------------------------------------------------------------------------


def test_two_fits_into_one_root_dir_keep_both_runs_checkpoints(tmp_path: Path) -> None:
    first, second = fit(tmp_path, 2), fit(tmp_path, 3)
    runs = tmp_path / "checkpoints"
    assert (first.run_dir, second.run_dir) == (runs / "run-0", runs / "run-1")
    assert saved_step(runs / "run-0" / "last.ckpt") == 2 * STEPS  # the first run's, kept
    assert saved_step(runs / "run-1" / "last.ckpt") == 3 * STEPS
    lines = metrics(tmp_path)
    assert [line["run"] for line in lines if line["kind"] == "epoch"] == ["run-0"] * 2 + [
        "run-1"
    ] * 3
    # "last" is the newest run's, and continues it in its folder
    assert newest_checkpoint(tmp_path) == runs / "run-1" / "last.ckpt"
    again = fit(tmp_path, 4, ckpt_path="last")
    assert again.run_dir == runs / "run-1" and again.global_step == 4 * STEPS
    assert saved_step(runs / "run-0" / "last.ckpt") == 2 * STEPS
    assert sorted(p.name for p in runs.iterdir()) == ["run-0", "run-1"]


def test_another_checkpoint_than_a_runs_last_begins_a_new_run(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trainer = accelctl.Trainer(
        accelerator="cpu", max_epochs=3, root_dir=tmp_path, keep_best=1, best_metric="val_accuracy",
        best_mode="max", enable_progress_bar=False,
    )  # fmt: skip
    val = DataLoader(separable(64, seed=1), batch_size=32)
    trainer.fit(Classifier(), loader(), val)
    run_0 = tmp_path / "checkpoints" / "run-0"
    (best,) = run_0.glob("best-*.ckpt")
    before = (run_0 / "last.ckpt").read_bytes()
    resumed = fit(tmp_path, 5, ckpt_path=best)  # an older point of run-0's: a branch of its own
    assert resumed.run_dir == tmp_path / "checkpoints" / "run-1"
    record = json.loads((resumed.run_dir / "run.json").read_text())
    assert record["started_from"] == str(best)
    assert (run_0 / "last.ckpt").read_bytes() == before  # run-0's latest point is not lost
    own = fit(tmp_path, 6, ckpt_path=run_0 / "last.ckpt")  # a run's own last.ckpt continues it
    assert own.run_dir == run_0 and own.global_step == 6 * STEPS


def test_a_restart_continues_the_run_its_launch_wrote_not_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = fit(tmp_path / "whole", 3)
    monkeypatch.setenv("ACCELCTL_LAUNCH_ID", "launch-a")
    with pytest.raises(Stop):
        fit(tmp_path, 3, lambda: Stopping(stop_at=STEPS + 3))  # run-0, checkpointed at step 8
    monkeypatch.setenv("ACCELCTL_LAUNCH_ID", "launch-b")
    fit(tmp_path, 1)  # another launch's run, newer: run-1
    monkeypatch.setenv("ACCELCTL_LAUNCH_ID", "launch-a")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # torchrun restarted launch-a's group
    restarted, model = fitted(tmp_path, 3)
    assert restarted.run_dir == tmp_path / "checkpoints" / "run-0"
    assert restarted.global_step == 3 * STEPS
    assert whole.run_dir is not None
    expected = torch.load(whole.run_dir / "last.ckpt", weights_only=True)["model"]
    for key, value in expected.items():
        assert torch.equal(model.state_dict()[key], value), key
    assert saved_step(tmp_path / "checkpoints" / "run-1" / "last.ckpt") == STEPS


def test_a_requeued_slurm_job_continues_its_own_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("ACCELCTL_LAUNCH_ID", "first-start")  # each start of a batch script: new
    with pytest.raises(Stop):
        fit(tmp_path, 3, lambda: Stopping(stop_at=STEPS + 3))
    monkeypatch.setenv("SLURM_JOB_ID", "999")
    fit(tmp_path, 1)  # another job's run
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv("ACCELCTL_LAUNCH_ID", "after-the-requeue")
    requeued = fit(tmp_path, 3)
    assert requeued.run_dir == tmp_path / "checkpoints" / "run-0"
    assert requeued.global_step == 3 * STEPS


def test_an_identity_names_no_launch_where_torchrun_says_none() -> None:
    assert Identity.from_environ({"TORCHELASTIC_RUN_ID": "none"}).launch is None
    assert Identity.from_environ({"TORCHELASTIC_RUN_ID": "abc"}).launch == "abc"
    ours = {"TORCHELASTIC_RUN_ID": "abc", "ACCELCTL_LAUNCH_ID": "ours"}
    assert Identity.from_environ(ours).launch == "ours"
    first_start = Identity.from_environ({"ACCELCTL_LAUNCH_ID": "ours"})
    assert not first_start.wrote({"launches": ["ours"]})  # only a restart continues by itself


def run_script(root: Path, *args: str, launch: int = 0, **env: str) -> subprocess.Popen[str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("ACCELCTL_", "TORCHELASTIC"))
    }
    command = [sys.executable, str(SCRIPT), str(root), *args]
    if launch:
        cli = [sys.executable, "-c", "from accelctl.cli import main; main()"]
        command = [*cli, "launch", "--cpu", "--devices", str(launch), *command[1:]]
    return subprocess.Popen(
        command, env={**environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(process: subprocess.Popen[str]) -> str:
    try:
        _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)  # hang guard
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    assert process.returncode == 0, stderr
    return stderr


def test_a_launch_and_a_process_alone_in_one_root_dir_at_once_lose_nothing(tmp_path: Path) -> None:
    launch = run_script(tmp_path, "3", launch=2)
    alone = run_script(tmp_path, "2")
    finished(launch), finished(alone)
    results = [json.loads(p.read_text()) for p in tmp_path.glob("final-*.json")]
    assert sorted((r["world_size"], r["global_step"]) for r in results) == [
        (1, 2 * STEPS),
        (2, 3 * STEPS // 2),
        (2, 3 * STEPS // 2),
    ]
    folders = {r["world_size"]: Path(r["run_dir"]) for r in results}
    assert folders[1] != folders[2]  # each run its own folder; both ranks of the launch one
    assert {folder.name for folder in folders.values()} == {"run-0", "run-1"}
    for world_size, folder in folders.items():
        state = torch.load(folder / "last.ckpt", weights_only=True)
        assert state["world_size"] == world_size and state["run"] == folder.name
    epochs = [(line["run"], line["epoch"]) for line in metrics(tmp_path) if line["kind"] == "epoch"]
    assert sorted(epochs) == sorted(
        [(folders[1].name, e) for e in range(2)] + [(folders[2].name, e) for e in range(3)]
    )


def test_continuing_a_run_another_fit_is_writing_is_refused_naming_it(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.mkdir()
    writer = run_script(tmp_path / "root", "3", ACCELCTL_TEST_HOLD=str(hold))
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S  # hang guard
        while not (hold / "ready").exists():
            assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
            time.sleep(0.1)
        with pytest.raises(CheckpointError) as refused:
            fit(tmp_path / "root", 3, ckpt_path="last")
        run_0 = tmp_path / "root" / "checkpoints" / "run-0"
        assert str(refused.value).startswith(
            f"this fit would continue run run-0 (ckpt_path='last') in {run_0}, which another fit "
            f"is writing now "
            f"(pid {writer.pid} on {socket.gethostname()}, since 20"
        )
        assert "two fits would overwrite each other's last.ckpt" in str(refused.value)
        assert fit(tmp_path / "root", 1).run_dir == run_0.parent / "run-1"  # a new run may start
    finally:
        (hold / "release").touch()
    finished(writer)
    assert saved_step(run_0 / "last.ckpt") == 3 * STEPS
    assert fit(tmp_path / "root", 4, ckpt_path=run_0 / "last.ckpt").run_dir == run_0  # free now


def held(hold: Path, writer: subprocess.Popen[str]) -> None:
    """Wait until ``writer`` holds its run (rank 0 wrote ``hold/ready`` at step 9)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S  # hang guard
    while not (hold / "ready").exists():
        assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
        time.sleep(0.1)


def ended(process: subprocess.Popen[str]) -> str:
    """``process``'s standard error once it ended (whatever its status)."""
    try:
        return process.communicate(timeout=RUN_TIMEOUT_S)[1]  # hang guard
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def shape(line: str) -> str:
    """A refusal's line with its run's folder, pid, host and time made placeholders."""
    line = re.sub(r" in \S+/checkpoints/run-0,", " in ROOT/checkpoints/run-0,", line)
    line = re.sub(r"copy \S+/checkpoints/run-0/", "copy ROOT/checkpoints/run-0/", line)
    return re.sub(r"\(pid \d+ on \S+, since \S+\)", "(pid PID on HOST, since TIME)", line)


def test_a_refusal_is_one_line_however_the_script_is_started(tmp_path: Path) -> None:
    """A refusal raised in every rank is shown once, however the script is started.

    Refusing to continue a run being written: shown by ``accelctl launch`` for its two processes, by
    rank 0 under torchrun, by the process alone; no rank's traceback, and no "stopped ... in epoch
    1, step 0" for a fit that never ran a step.
    """
    hold, root = tmp_path / "hold", tmp_path / "root"
    hold.mkdir()
    writer = run_script(root, "3", ACCELCTL_TEST_HOLD=str(hold))
    try:
        held(hold, writer)
        launched = run_script(root, "3", "last", launch=2)
        torchrun = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
             "2", str(SCRIPT), str(root), "3", "last"],
            env={**os.environ, "ACCELCTL_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        alone = run_script(root, "3", "last", ACCELCTL_ACCELERATOR="cpu")
        debug = subprocess.Popen(  # the CLI's --debug: ACCELCTL_DEBUG=1 in its processes
            [sys.executable, "-m", "accelctl", "--debug", "launch", "--cpu", "--devices", "2",
             str(SCRIPT), str(root), "3", "last"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        outputs = {"launch": ended(launched), "torchrun": ended(torchrun), "alone": ended(alone)}
        debugged = ended(debug)
    finally:
        (hold / "release").touch()
    finished(writer)
    # The switch: the ranks' tracebacks as well, and still the launch's line. At least the first
    # rank to fail prints its own: torchrun then stops the other, which may be stopped before it
    # prints (under load it was, once).
    tracebacks = [line for line in debugged.splitlines() if "Traceback (most recent" in line]
    assert 1 <= len(tracebacks) <= 2, debugged
    assert all(re.match(r"\[rank[01]\]: Traceback", line) for line in tracebacks), tracebacks
    assert debugged.splitlines()[-1].startswith("accelctl launch: this fit would continue")
    # The line docs/training.md shows, but for the run's folder, pid, host and time.
    page = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    shown = re.search(r"```text\n(accelctl launch: this fit would continue [^\n]*)\n```", page)
    assert shown is not None
    assert shape(outputs["launch"].strip().splitlines()[-1]) == shape(shown.group(1))
    refusal = "this fit would continue run run-0 (ckpt_path='last') in "
    hint = " (ACCELCTL_DEBUG=1 shows the traceback)"
    prefixes = {"launch": "accelctl launch: ", "torchrun": "accelctl: ", "alone": "accelctl: "}
    for how, stderr in outputs.items():
        said = [line for line in stderr.splitlines() if "would continue run" in line]
        assert len(said) == 1, (how, stderr)
        assert said[0].startswith(prefixes[how] + refusal) and said[0].endswith(hint), said
        assert "[rank" not in stderr and "CheckpointError" not in stderr, (how, stderr)
        assert "stopped by an error" not in stderr and "epoch 1, step 0" not in stderr, stderr
    assert "Traceback" not in outputs["launch"] + outputs["alone"]  # torchrun prints its own
    assert (launched.returncode, alone.returncode) == (1, 1) and torchrun.returncode != 0


def test_ctrl_c_in_a_process_alone_ends_with_the_one_line_and_130(tmp_path: Path) -> None:
    """Ctrl-C in a training process alone ends with the log's line and by SIGINT (130 in a shell).

    The line names the last checkpoint; no ``KeyboardInterrupt`` traceback.
    """
    hold = tmp_path / "hold"
    hold.mkdir()
    process = run_script(tmp_path / "root", "3", ACCELCTL_TEST_HOLD=str(hold),
                         ACCELCTL_ACCELERATOR="cpu")  # fmt: skip
    try:
        held(hold, process)  # in its ninth step: the first epoch's checkpoint is written
        process.send_signal(signal.SIGINT)
        stderr = ended(process)
    finally:
        (hold / "release").touch()
    assert process.returncode == -signal.SIGINT, stderr  # what a shell shows as 130
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    last = (tmp_path / "root" / "checkpoints" / "run-0" / "last.ckpt").resolve()
    assert stderr.splitlines()[-1] == (
        f"accelctl: interrupted (Ctrl-C) in epoch 2, step {STEPS}; the last checkpoint is {last} "
        f"(epoch 1, step {STEPS}); resume from it with fit(ckpt_path='last'), or by running the "
        f"same command with ACCELCTL_CKPT_PATH={last}"
    )


def test_sharded_runs_sharing_a_root_dir_keep_each_others_shards(tmp_path: Path) -> None:
    """Two FSDP fits in one root_dir keep each other's shards; continuing the held run is refused.

    One writes a checkpoint at every step while the other holds mid-run: neither removes the other's
    shards, and the refusal names the held run.
    """
    hold = tmp_path / "hold"
    hold.mkdir()
    root = tmp_path / "root"
    held = run_script(root, "2", ACCELCTL_TEST_HOLD=str(hold), ACCELCTL_TEST_FSDP="1")
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S  # hang guard
        while not (hold / "ready").exists():
            assert held.poll() is None and time.monotonic() < deadline, held.communicate()
            time.sleep(0.1)
        run_0 = root / "checkpoints" / "run-0"
        shards = torch.load(run_0 / "last.ckpt", weights_only=True)["shards"]
        finished(run_script(root, "2", ACCELCTL_TEST_FSDP="1"))  # 16 writes meanwhile
        assert (run_0 / shards / ".metadata").is_file()  # the held run's, untouched
        with pytest.raises(CheckpointError, match=r"which another fit is writing now \(pid "):
            fit(root, 3, ckpt_path=run_0 / "last.ckpt", strategy="fsdp")
    finally:
        (hold / "release").touch()
    finished(held)
    for run in ("run-0", "run-1"):
        state = torch.load(root / "checkpoints" / run / "last.ckpt", weights_only=True)
        assert state["global_step"] == 2 * STEPS and state["run"] == run
        assert (root / "checkpoints" / run / state["shards"] / ".metadata").is_file()
        resumed = fit(root, 3, ckpt_path=root / "checkpoints" / run / "last.ckpt", strategy="fsdp")
        assert resumed.global_step == 3 * STEPS and resumed.run_dir == root / "checkpoints" / run


# -- the log -----------------------------------------------------------------------------------


def test_a_redirected_fit_logs_its_start_epochs_checkpoints_and_end(tmp_path: Path) -> None:
    root = tmp_path / "root"
    stderr = finished(run_script(root, "2"))  # standard error is a pipe, not a terminal
    run_0 = (root / "checkpoints" / "run-0").resolve()
    lines = [line for line in stderr.splitlines() if line.startswith("accelctl: ")]
    expected = [
        "training on cpu: devices cpu, 1 process, strategy none (the model as it is), precision 32",
        f"run run-0, new: checkpoints in {run_0} (last.ckpt at each epoch's end); figures in "
        f"{(root / 'metrics.jsonl').resolve()}",
        "epoch 1/2 (step 8): train_loss *",
        f"checkpoint written: {run_0 / 'last.ckpt'} (epoch 1, step 8)",
        "epoch 2/2 (step 16): train_loss *",
        f"checkpoint written: {run_0 / 'last.ckpt'} (epoch 2, step 16)",
        "stopped: max_epochs=2 reached, step 16",
    ]
    assert len(lines) == len(expected), stderr
    for line, pattern in zip(lines, expected, strict=True):
        if pattern.endswith("*"):
            assert line.startswith(f"accelctl: {pattern[:-1]}") and "samples/s" in line, line
        else:
            assert line == f"accelctl: {pattern}"

    stderr = finished(run_script(root, "2", "last"))
    assert (
        f"accelctl: nothing to train: {run_0 / 'last.ckpt'} was written at the end of epoch 2 "
        "and max_epochs=2; give a larger max_epochs to train on"
    ) in stderr.splitlines()
    stderr = finished(run_script(root, "3", "last"))
    assert (
        f"accelctl: resumed from {run_0 / 'last.ckpt'}: the start of epoch 3 of 3, step 16"
        in stderr.splitlines()
    )


def test_ctrl_c_in_a_process_alone_names_the_last_checkpoint_and_how_to_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with caplog.at_level(logging.INFO, logger="accelctl"), pytest.raises(KeyboardInterrupt):
        fit(tmp_path, 3, lambda: Stopping(stop_at=STEPS + 2, interrupt=True))
    last = (tmp_path / "checkpoints" / "run-0" / "last.ckpt").resolve()
    assert caplog.records[-1].getMessage() == (
        f"interrupted (Ctrl-C) in epoch 2, step {STEPS + 1}; the last checkpoint is {last} "
        f"(epoch 1, step {STEPS}); resume from it with fit(ckpt_path='last'), or by running the "
        f"same command with ACCELCTL_CKPT_PATH={last}"
    )
    assert caplog.records[-1].levelno == logging.WARNING
    monkeypatch.setenv("ACCELCTL_CKPT_PATH", str(last))  # the advice, followed
    resumed = fit(tmp_path, 3)
    assert resumed.run_dir == last.parent and resumed.global_step == 3 * STEPS
    monkeypatch.setenv("ACCELCTL_CKPT_PATH", str(tmp_path / "nowhere.ckpt"))
    with pytest.raises(CheckpointError, match=r"^ACCELCTL_CKPT_PATH='.*nowhere\.ckpt' is not a"):
        fit(tmp_path, 3)


def test_an_error_is_logged_with_the_checkpoint_to_resume_from(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="accelctl"), pytest.raises(Stop):
        fit(tmp_path, 3, lambda: Stopping(stop_at=3))
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == (
        "stopped by an error in epoch 1, step 2: Stop: stopped at step 3; no checkpoint was written"
    )


def test_a_fit_that_ran_no_step_says_so_not_epoch_1_step_0(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="accelctl"), pytest.raises(Stop):
        fit(tmp_path, 3, lambda: Stopping(stop_at=1))
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == (
        "stopped by an error before its first step ended: Stop: stopped at step 1; no checkpoint "
        "was written"
    )

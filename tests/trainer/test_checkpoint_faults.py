"""Checkpoints under the faults a cluster user meets.

A full disk (a small tmpfs), a file-size limit, a write killed half-way, a truncated or foreign file
(docs/training.md, "Checkpoints and resuming").
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import accelctl
from accelctl._training.checkpoint import CheckpointError

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, separable

pytestmark = pytest.mark.slow  # every test here trains

RUN_0 = Path("checkpoints", "run-0")
#: A hang guard only: one process trains a few steps (seconds); nothing here is timed.
SCRIPT_TIMEOUT_S = 300


class Heavy(Classifier):
    """A classifier whose checkpoints weigh ~260 KiB (a buffer), to fill a small disk."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ballast", torch.zeros(64 * 1024))


def loader() -> DataLoader[Any]:
    return DataLoader(separable(80), batch_size=10, shuffle=True)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted in the test's folder (unmounted after)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` but ``leave`` bytes."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    with (disk / "filler").open("wb") as file:
        file.write(b"\0" * max(0, free - leave))


@pytest.mark.parametrize("strategy", ["auto", "fsdp"])
def test_a_full_disk_is_a_checkpoint_error_naming_the_path_the_cause_and_the_last_good_one(
    small_disk: Path, strategy: str
) -> None:
    model = Heavy()

    def on_epoch_end(t: accelctl.Trainer) -> None:
        if t.current_epoch == 1:  # epoch 0's checkpoint is on disk; the next finds it full
            fill(small_disk, leave=16 * 1024)

    model.on_epoch_end = on_epoch_end  # type: ignore[method-assign,assignment]
    trainer = accelctl.Trainer(
        max_epochs=3, root_dir=small_disk, enable_progress_bar=False, strategy=strategy
    )
    with pytest.raises(CheckpointError) as caught:
        trainer.fit(model, loader())
    last = small_disk / RUN_0 / "last.ckpt"
    message = str(caught.value)
    assert message.startswith(
        f"cannot write checkpoint {last}: No space left on device (the file system of "
        f"{last.parent} is full: "
    ), message
    assert f"is intact at {last}" in message and "Free space or raise the limit" in message
    state = torch.load(last, weights_only=True)  # whole, and the first epoch's
    assert (state["epoch"], state["global_step"]) == (1, 8)
    assert temporaries(last.parent) == []


def test_a_file_size_limit_is_named_with_its_size(tmp_path: Path) -> None:
    """A write past a job's file-size limit fails with EFBIG, named with the limit's size.

    ``ulimit -f`` of a job, in a process of its own that ignores SIGXFSZ (as Python does).
    """
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import accelctl
        from accelctl._training.checkpoint import CheckpointError
        from trainer_models import Classifier, separable
        from torch.utils.data import DataLoader

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        model = Classifier()

        def on_epoch_end(t):
            if t.current_epoch == 1:  # epoch 0's checkpoint is on disk
                resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))

        model.on_epoch_end = on_epoch_end
        trainer = accelctl.Trainer(max_epochs=3, root_dir={str(tmp_path)!r},
                                   enable_progress_bar=False)
        try:
            trainer.fit(model, DataLoader(separable(80), batch_size=10, shuffle=True))
        except CheckpointError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    last = tmp_path / RUN_0 / "last.ckpt"
    assert done.stdout.startswith(
        f"cannot write checkpoint {last}: File too large (a file-size limit of 1024 bytes: the "
        f"job's `ulimit -f`"
    ), done.stdout + done.stderr[-3000:]
    assert f"is intact at {last}" in done.stdout
    assert temporaries(last.parent) == []


def test_a_killed_writes_temporary_file_is_removed_when_the_run_is_resumed(
    tmp_path: Path,
) -> None:
    """A write killed half-way leaves its temporary file; the continuing fit removes it first.

    SIGKILL in torch.save; the continuing fit removes the file before it trains.
    """
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch
        import accelctl
        from trainer_models import Classifier, separable
        from torch.utils.data import DataLoader

        save, calls = torch.save, []

        def killed(obj, file):
            calls.append(1)
            if len(calls) == 2:  # the second epoch's checkpoint, half written
                save(obj, file)
                file.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            save(obj, file)

        torch.save = killed
        trainer = accelctl.Trainer(max_epochs=3, root_dir={str(tmp_path)!r},
                                   enable_progress_bar=False)
        trainer.fit(Classifier(), DataLoader(separable(80), batch_size=10, shuffle=True))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=SCRIPT_TIMEOUT_S, check=False
    )
    assert done.returncode == -9, done.stderr[-3000:]
    folder = tmp_path / RUN_0
    left = temporaries(folder)
    assert len(left) == 1 and left[0].startswith(".last.ckpt."), left
    assert (folder / left[0]).stat().st_size > 1000  # the size of a checkpoint

    seen: list[list[str]] = []
    model = Classifier()
    step = model.training_step

    def training_step(batch: Any, batch_idx: int) -> torch.Tensor:
        if not seen:
            seen.append(temporaries(folder))
        return step(batch, batch_idx)

    model.training_step = training_step  # type: ignore[method-assign]
    trainer = accelctl.Trainer(max_epochs=3, root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(model, loader(), ckpt_path="last")
    assert seen == [[]]  # gone before the resumed fit trained
    assert trainer.global_step == 24 and temporaries(folder) == []


def test_a_cut_off_write_is_removed_at_the_next_write(tmp_path: Path) -> None:
    """Also where no resume planned the run (a temporary left by another process meanwhile)."""
    model = Classifier()
    step = model.training_step
    stale = tmp_path / RUN_0 / ".last.ckpt.4242.tmp"

    def training_step(batch: Any, batch_idx: int) -> torch.Tensor:
        if not stale.exists() and batch_idx == 0:
            stale.write_bytes(b"PK\x03\x04 half a checkpoint")
        return step(batch, batch_idx)

    model.training_step = training_step  # type: ignore[method-assign]
    accelctl.Trainer(max_epochs=1, root_dir=tmp_path, enable_progress_bar=False).fit(
        model, loader()
    )
    assert temporaries(tmp_path / RUN_0) == []


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    accelctl.Trainer(max_epochs=1, root_dir=tmp_path, enable_progress_bar=False).fit(
        Classifier(), loader()
    )
    return tmp_path / RUN_0 / "last.ckpt"


def resume(root: Path, path: Path) -> None:
    trainer = accelctl.Trainer(max_epochs=2, root_dir=root, enable_progress_bar=False)
    trainer.fit(Classifier(), loader(), ckpt_path=path)


def test_a_truncated_checkpoint_is_called_truncated(tmp_path: Path, checkpoint: Path) -> None:
    cut = tmp_path / "cut.ckpt"
    whole = checkpoint.read_bytes()
    for size in (len(whole) // 2, len(whole) - 10, 0):
        cut.write_bytes(whole[:size])
        with pytest.raises(CheckpointError) as caught:
            resume(tmp_path, cut)
        assert str(caught.value).startswith(
            f"checkpoint {cut} is truncated ({size} bytes, the end of the archive torch.save "
            f"writes is missing): a write or a copy was cut off."
        ), str(caught.value)


# Seeded noise: torch's legacy reader fails on random bytes in many ways (an IndexError from its
# unpickler for seeds 3 and 12, among others); each must be the same error.
@pytest.mark.parametrize("seed", [0, 3, 12, 13, 22])
def test_a_file_of_random_bytes_is_not_a_checkpoint(
    tmp_path: Path, checkpoint: Path, seed: int
) -> None:
    noise = tmp_path / "noise.ckpt"
    generator = torch.Generator().manual_seed(seed)
    noise.write_bytes(
        bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=generator).tolist())
    )
    if noise.read_bytes()[:1] in (b"P", b"\x80"):  # vanishingly rare: keep the case itself
        noise.write_bytes(b"\x00" + noise.read_bytes()[1:])
    with pytest.raises(CheckpointError) as caught:
        resume(tmp_path, noise)
    message = str(caught.value)
    assert message.startswith(f"{noise} is not a checkpoint: it is neither the zip archive ")
    assert "weights_only=False" not in message


def test_a_checkpoint_of_another_kind_still_names_weights_only(tmp_path: Path) -> None:
    """A torch.save file of a whole module is refused with what weights_only allows, not as corrupt.

    A whole module, not tensors and containers.
    """
    other = tmp_path / "module.ckpt"
    torch.save({"format": 1, "model": nn.Linear(2, 2)}, other)
    with pytest.raises(CheckpointError, match=r"weights_only=True\), which refuses anything"):
        resume(tmp_path, other)


@pytest.mark.parametrize(
    ("number", "said"),
    [
        (errno.ENOENT, "was removed or replaced while it was written"),
        (errno.EACCES, "this process may not write in"),
        (errno.EIO, "a full disk, or a file-size limit"),
    ],
)
def test_a_failed_write_names_its_cause_not_always_the_disk(
    tmp_path: Path, number: int, said: str
) -> None:
    # A folder removed under a writer (another job cleaning up) is no full disk.
    from accelctl._training.checkpoint import unwritable

    error = unwritable(tmp_path / "run-0" / "last.ckpt", OSError(number, os.strerror(number)))
    message = str(error)
    assert message.startswith(f"cannot write checkpoint {tmp_path / 'run-0' / 'last.ckpt'}: ")
    assert said in message and os.strerror(number) in message
    assert "there is no earlier checkpoint to resume from" in message

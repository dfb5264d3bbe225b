"""The Trainer's checkpoints as Ray Train's, and back.

A checkpoint the Trainer writes is a file, ``<run folder>/last.ckpt`` (and, with
``strategy="fsdp"``, the folder of shards beside it that the file names, ``last.shards/``). Ray
Train takes a checkpoint as a directory that it copies into its storage. So rank 0 lays the
checkpoint out in a directory of its own inside the run folder (hard links: nothing is copied
before Ray copies it), with ``accelctl.json`` saying what it is (the Ray run it belongs to, the
restart that wrote it, its epoch and step), reports it, and removes the directory.

Back: Ray hands a resumed run its latest checkpoint (``ray.train.get_checkpoint()``); the
file in it is what a fit resumes from when its run folder has no checkpoint of its own. Ray's
storage is a shared folder or a cloud bucket; from a bucket, each node downloads the checkpoint
once into one folder its workers share, so that every rank reads the same path.

No Ray at module level: the functions that need it take its objects.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The file in a Ray checkpoint that says it is one of the Trainer's.
META_FILE = "accelctl.json"
#: The staging directory's name inside the run folder (one per process).
STAGING_PREFIX = ".ray-report-"


@dataclass(frozen=True)
class CheckpointMeta:
    """What a Ray checkpoint of the Trainer's holds, beside the file."""

    #: The Ray run's id (``ACCELCTL_LAUNCH_ID`` in its workers).
    launch: str
    #: Ray's restarts of the run when it was written.
    restart: int
    #: The file's name in the checkpoint (``last.ckpt``), and the run folder it was written in.
    file: str
    run: str
    epoch: int
    step: int

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=1) + "\n"

    @classmethod
    def read(cls, directory: Path) -> CheckpointMeta | None:
        """The meta of the checkpoint in ``directory``; None when it is not the Trainer's."""
        try:
            record = json.loads((directory / META_FILE).read_text())
            return cls(
                launch=str(record["launch"]),
                restart=int(record["restart"]),
                file=str(record["file"]),
                run=str(record["run"]),
                epoch=int(record["epoch"]),
                step=int(record["step"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links
        shutil.copy2(source, target)


def stage(checkpoint: Path, meta: CheckpointMeta) -> Path:
    """Stage ``checkpoint`` and its meta in a directory for Ray to copy.

    With its shards' folder, where it has one; inside its run folder. The caller removes it once Ray
    has copied it.

    The checkpoint is linked, not copied: the Trainer replaces ``last.ckpt`` by a rename, which
    leaves the linked file whole, and removes old shard folders only after writing new ones."""
    folder = checkpoint.parent
    staged = folder / f"{STAGING_PREFIX}{os.getpid()}"
    shutil.rmtree(staged, ignore_errors=True)  # a killed report's
    staged.mkdir()
    _link_or_copy(str(checkpoint), str(staged / checkpoint.name))
    shards = folder / f"{checkpoint.name.removesuffix('.ckpt')}.shards"
    if shards.is_dir():
        shutil.copytree(shards, staged / shards.name, copy_function=_link_or_copy)
    (staged / META_FILE).write_text(meta.to_json())
    return staged


def local_directory(checkpoint: Any) -> Path:
    """Return the directory of Ray checkpoint ``checkpoint`` on this node.

    Its own path where Ray's storage is a folder, else a download into a folder of this node's
    temporary directory that every worker of the node shares (downloaded once, under a lock)."""
    if getattr(checkpoint.filesystem, "type_name", "") == "local":
        return Path(checkpoint.path)
    from filelock import FileLock

    key = hashlib.sha256(f"{checkpoint.filesystem.type_name}:{checkpoint.path}".encode())
    target = Path(tempfile.gettempdir()) / f"accelctl-ray-checkpoint-{key.hexdigest()[:16]}"
    done = target / ".complete"
    with FileLock(f"{target}.lock"):
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            checkpoint.to_directory(str(target))
            done.touch()
    return target


def remove(staged: Path) -> None:
    """Remove a staging directory (idempotent)."""
    with contextlib.suppress(OSError):
        shutil.rmtree(staged)


@dataclass(frozen=True)
class Resume:
    """How a worker's fits continue a Ray run that Ray resumed."""

    #: Ray's restarts of the run (``TORCHELASTIC_RESTART_COUNT``): those of this ``fit()``'s
    #: worker group, or, for a new ``fit()`` of the run, one more than the checkpoint's.
    restarts: int
    #: The file a fit resumes from where its run folder has no checkpoint of its own (None:
    #: Ray has none of the Trainer's).
    checkpoint: Path | None


def resume_from(checkpoint: Any, starts: int) -> Resume:
    """Say what Ray's latest checkpoint of the run means for a worker's fits.

    The checkpoint is ``ray.train.get_checkpoint()``, None when it has none; Ray started the
    worker's group ``starts`` times before in this ``fit()``. A checkpoint that is not the Trainer's
    (a hand-written loop's) changes nothing."""
    if checkpoint is None:
        return Resume(starts, None)
    directory = local_directory(checkpoint)
    meta = CheckpointMeta.read(directory)
    if meta is None or not (directory / meta.file).is_file():
        return Resume(starts, None)
    return Resume(max(starts, meta.restart + 1), directory / meta.file)

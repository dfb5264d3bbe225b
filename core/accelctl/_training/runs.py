"""Run folders: every fit of a Trainer writes its checkpoints into a folder of its own.

Under ``<root_dir>/checkpoints`` (``run-0``, ``run-1``, ...), so that no run overwrites
another's (docs/training.md, "Runs and their folders").

A run is continued in its folder only from its own latest checkpoint: ``ckpt_path="last"`` (the
newest run that has a ``last.ckpt``), that run's ``last.ckpt`` given as a path, or a restart of
the launch that wrote it (torchrun's ``--max-restarts``, a SLURM requeue, Ray Train's restarts),
found by the launch's identity written in the folder's ``run.json``. Any other checkpoint (a best
one, a copy) begins a new run. While a fit writes a folder, its rank 0 holds the folder's lock
(released by the system when the process dies), and a second fit that would continue the same
run is refused, naming the holder: two writers would overwrite each other's ``last.ckpt``.

Only rank 0 plans the run (:func:`plan_run`); the others learn the plan from it, so that every
process of a launch writes into the same folder even while other fits create runs beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._contract.errors import warn_user
from .._contract.settings import launch_id
from .checkpoint import CHECKPOINT_DIR, LAST, CheckpointError, remove_temporaries

#: A run folder's file saying what wrote it (also read by people).
RUN_FILE = "run.json"
#: The file whose lock the writing fit holds.
LOCK_FILE = ".lock"
_RUN_NAME = re.compile(r"run-(\d+)")


@dataclass(frozen=True)
class Identity:
    """What identifies the launch a fit runs in, to find its run folder again after a restart."""

    #: ``ACCELCTL_LAUNCH_ID`` (one per ``accelctl launch``, the same in the processes of its
    #: restarts; also set by the Ray bridge per Ray Train run), else torchrun's
    #: ``TORCHELASTIC_RUN_ID`` (unless ``"none"``, its default on several machines: no launch).
    launch: str | None = None
    #: ``SLURM_JOB_ID``: a requeued job keeps it.
    slurm_job: str | None = None
    #: Restarts of the launch (torchrun's, Ray's) and requeues of the SLURM job.
    launch_restarts: int = 0
    slurm_restarts: int = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Identity:
        launch = launch_id(environ) or environ.get("TORCHELASTIC_RUN_ID") or None
        return cls(
            launch=None if launch in (None, "none") else launch,
            slurm_job=environ.get("SLURM_JOB_ID") or None,
            launch_restarts=_count(environ.get("TORCHELASTIC_RESTART_COUNT")),
            slurm_restarts=_count(environ.get("SLURM_RESTART_COUNT")),
        )

    @property
    def restarts(self) -> int:
        """How many times this run was started again (0 at the first start)."""
        return self.launch_restarts + self.slurm_restarts

    def wrote(self, record: Mapping[str, Any]) -> bool:
        """Whether a run folder's ``run.json`` says this launch (or this requeued job) wrote it."""
        if self.launch_restarts and self.launch and self.launch in record.get("launches", []):
            return True
        job = self.slurm_job
        return bool(self.slurm_restarts and job and record.get("slurm_job") == job)


def _count(raw: str | None) -> int:
    try:
        return max(0, int(raw or 0))
    except ValueError:
        return 0


@dataclass(frozen=True)
class RunPlan:
    """Where a fit writes, and what it resumes from: rank 0's decision, sent to every rank."""

    #: The run folder (``<root_dir>/checkpoints/run-N``).
    folder: Path
    #: The checkpoint to load (None: from the start).
    resume_from: Path | None = None
    #: True when the fit continues the run in ``folder``; False for a new run.
    continued: bool = False
    #: What chose it, in words, for the log and the refusal (``"ckpt_path='last'"``,
    #: ``"a restart of its launch"``; for a new run, what it starts from).
    why: str = ""

    @property
    def summary(self) -> str:
        """``run-3, continued (ckpt_path='last')``, ``run-4, new``."""
        return f"{self.name}, {'continued' if self.continued else 'new'}" + (
            f" ({self.why})" if self.why else ""
        )

    @property
    def name(self) -> str:
        return self.folder.name


def run_folders(root: Path) -> list[Path]:
    """The run folders under ``<root>/checkpoints``, oldest (lowest number) first."""
    parent = root / CHECKPOINT_DIR
    try:
        entries = list(parent.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    numbered = [
        (int(match.group(1)), entry)
        for entry in entries
        if (match := _RUN_NAME.fullmatch(entry.name)) and entry.is_dir()
    ]
    return [entry for _, entry in sorted(numbered)]


def read_record(folder: Path) -> dict[str, Any]:
    """A run folder's ``run.json`` ({} when missing or unreadable: a folder being made)."""
    try:
        record = json.loads((folder / RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def newest_checkpoint(root: Path) -> Path | None:
    """``last.ckpt`` of the newest run that has one (what ``ckpt_path="last"`` means)."""
    for folder in reversed(run_folders(root)):
        if (folder / LAST).is_file():
            return folder / LAST
    return None


def check_ckpt_path(
    ckpt_path: str | os.PathLike[str] | None, root: Path, *, given_as: str = "ckpt_path"
) -> None:
    """Refuse, before anything starts, a ``ckpt_path`` that is neither None, ``"last"`` nor a file.

    :param given_as: where it came from, for the message (``ACCELCTL_CKPT_PATH``).
    :raises CheckpointError: naming the path and what is accepted.
    """
    if ckpt_path is None or ckpt_path == "last" or Path(ckpt_path).is_file():
        return
    raise CheckpointError(
        f"{given_as}={str(ckpt_path)!r} is not a checkpoint file; give the path of a .ckpt "
        f"file, or 'last' for the newest run's {LAST} under {root / CHECKPOINT_DIR}"
    )


def without_folder(root: Path, ckpt_path: str | os.PathLike[str] | None) -> Path | None:
    """Return the checkpoint that a fit that writes none loads.

    Writes none: ``enable_checkpointing=False``. ``"last"`` is the newest run's ``last.ckpt``
    (none yet: a warning, and from the start)."""
    if ckpt_path is None:
        return None
    if ckpt_path != "last":
        return Path(ckpt_path)
    newest = newest_checkpoint(root)
    if newest is None:
        warn_user(
            f"ckpt_path='last': no checkpoint under {root / CHECKPOINT_DIR} yet, training from "
            f"the start"
        )
    return newest


class RunLock:
    """The lock a fit's rank 0 holds on its run folder while it writes there."""

    def __init__(self, folder: Path) -> None:
        from filelock import FileLock

        self.folder = folder
        self._lock = FileLock(str(folder / LOCK_FILE))

    def take(self) -> bool:
        """Take the lock now (True), or False when another fit holds it."""
        from filelock import Timeout

        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            return False
        return True

    def release(self) -> None:
        """Let the folder go (idempotent; the system releases it when the process dies)."""
        self._lock.release(force=True)


@dataclass
class RunFolders:
    """Rank 0's side of the run folders of ``root``: plans the fit's run, holds its lock."""

    root: Path
    identity: Identity = field(default_factory=Identity.from_environ)
    lock: RunLock | None = None

    def plan(self, ckpt_path: str | os.PathLike[str] | None) -> RunPlan:
        """The run folder to write and the checkpoint to resume from, its lock taken.

        - a restart: the run its launch wrote (its ``last.ckpt``, else ``ckpt_path``);
        - ``"last"``: the newest run that has a ``last.ckpt``, continued (none yet: a new run,
          with a warning);
        - a run's own ``last.ckpt``: that run, continued;
        - any other path: a new run that starts from that checkpoint;
        - None: a new run, from the start.

        :raises CheckpointError: when the run to continue is being written by another fit.
        """
        if self.identity.restarts:
            own = self._own_run()
            if own is not None:
                resume = own / LAST if (own / LAST).is_file() else _path_or_none(ckpt_path)
                return self._continue(own, resume, "a restart of its launch")
            if ckpt_path is None:
                ckpt_path = "last"  # no folder names this launch: the newest run, as before
        if ckpt_path == "last":
            newest = newest_checkpoint(self.root)
            if newest is None:
                if not self.identity.restarts:
                    warn_user(
                        f"ckpt_path='last': no checkpoint under {self.root / CHECKPOINT_DIR} yet, "
                        f"training from the start"
                    )
                return self._new(None, "ckpt_path='last' found no checkpoint")
            return self._continue(newest.parent, newest, "ckpt_path='last'")
        if ckpt_path is None:
            return self._new(None, "")
        path = Path(ckpt_path)
        folder = path.parent
        if path.name == LAST and folder.parent.resolve() == (self.root / CHECKPOINT_DIR).resolve():
            if _RUN_NAME.fullmatch(folder.name):
                return self._continue(folder, path, f"from its own {LAST}")
        return self._new(path, f"from {path}")

    def _own_run(self) -> Path | None:
        for folder in reversed(run_folders(self.root)):
            if self.identity.wrote(read_record(folder)):
                return folder
        return None

    def _continue(self, folder: Path, resume: Path | None, why: str) -> RunPlan:
        lock = RunLock(folder)
        if not lock.take():
            holder = read_record(folder)
            who = ""
            if holder.get("pid"):
                who = f" (pid {holder['pid']} on {holder.get('host', '?')}, since "
                who += f"{holder.get('started', '?')})"
            raise CheckpointError(
                f"this fit would continue run {folder.name} ({why}) in {folder}, which another "
                f"fit is writing "
                f"now{who}: two fits would overwrite each other's {LAST}. Wait for it to end; "
                f"or start a new run (ckpt_path=None), or one from its checkpoint (copy "
                f"{folder / LAST} elsewhere and give that path)"
            )
        self.lock = lock
        remove_temporaries(folder)  # a killed write's; this fit is the folder's only writer now
        self._write_record(folder)
        return RunPlan(folder, resume, continued=True, why=why)

    def _new(self, resume: Path | None, why: str) -> RunPlan:
        parent = self.root / CHECKPOINT_DIR
        parent.mkdir(parents=True, exist_ok=True)
        existing = run_folders(self.root)
        number = int(existing[-1].name.removeprefix("run-")) + 1 if existing else 0
        while True:  # another fit may take a number between the listing and the mkdir
            folder = parent / f"run-{number}"
            try:
                folder.mkdir()
                break
            except FileExistsError:
                number += 1
        lock = RunLock(folder)
        lock.take()  # a new folder: nobody else continues a run without a checkpoint
        self.lock = lock
        self._write_record(folder, started_from=resume)
        return RunPlan(folder, resume, continued=False, why=why)

    def _write_record(self, folder: Path, *, started_from: Path | None = None) -> None:
        """``run.json``: this fit's launch joins the run's, and the holder is this process."""
        record = read_record(folder)
        launches = list(record.get("launches", []))
        if self.identity.launch and self.identity.launch not in launches:
            launches.append(self.identity.launch)
        record.update(
            run=folder.name,
            launches=launches,
            slurm_job=self.identity.slurm_job or record.get("slurm_job"),
            pid=os.getpid(),
            host=socket.gethostname(),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        record.setdefault("created", record["started"])
        if started_from is not None:
            record["started_from"] = str(started_from)
        temporary = folder / f".{RUN_FILE}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(temporary, folder / RUN_FILE)

    def release(self) -> None:
        """Let the run folder go (the fit ended)."""
        if self.lock is not None:
            with contextlib.suppress(OSError):
                self.lock.release()
            self.lock = None


def _path_or_none(ckpt_path: str | os.PathLike[str] | None) -> Path | None:
    return None if ckpt_path is None or ckpt_path == "last" else Path(ckpt_path)

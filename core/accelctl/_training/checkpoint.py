"""Checkpoints of a ``fit``: what they hold, when they are written, how a fit resumes from one.

One ``torch.save`` file of tensors and plain containers, read with ``torch.load(weights_only=True)``
(docs/training.md, "Checkpoints and resuming"), written by rank 0. Its keys: ``model``,
``optimizer``, ``scaler`` (state dicts), ``epoch``, ``batches_done`` (of ``epoch``; 0 at its end),
``global_step``, ``rng`` (per rank, the random states now), ``epoch_rng`` (per rank, what decides
the data order of ``epoch`` at its start: the random states, the loader's own generators, the
states of its parts that save one; a fit resumed mid-epoch restores them, replays the order and
drops the batches already trained, one resumed at an epoch's end restores them before the epoch
starts), ``metrics``, ``best`` (``[score, file name]``), ``run``, ``world_size``.

A sharded checkpoint (``strategy="fsdp"``, format 2) holds no ``model`` and ``optimizer``: every
process writes its shards of them into the folder the file names (key ``shards``;
:mod:`.sharded_checkpoint`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, cast

from .._choice.process_environment import ProcessEnvironment
from .._contract.errors import TrainerError, warn_user
from .best import BestCheckpoints, best_name
from .rng import rng_state, set_epoch_rng_state, set_rng_state
from .sharded_checkpoint import load_shards, prune, save_shards, saved_shapes, shards_folder

if TYPE_CHECKING:
    import torch

#: The folder of the run folders inside ``root_dir`` (:mod:`.runs`).
CHECKPOINT_DIR = "checkpoints"
#: The checkpoint that is always a run's latest one.
LAST = "last.ckpt"
#: Bumped when the layout changes in a way an older reader cannot follow.
FORMAT = 1
#: A sharded checkpoint's file: the loop state, and the folder of its model and optimizer shards.
SHARDED_FORMAT = 2


class CheckpointError(TrainerError):
    """A checkpoint cannot be written, found or read."""


@dataclass(frozen=True)
class CheckpointConfig:
    """When a fit writes checkpoints and which it keeps (the ``Trainer``'s arguments)."""

    #: Write checkpoints at all: ``last.ckpt`` at the end of every epoch, at least.
    enabled: bool = True
    #: Also write it every this many optimizer steps (None: epoch ends only).
    every_n_steps: int | None = None
    #: Keep this many best epoch-end checkpoints besides ``last.ckpt`` (0: none).
    keep_best: int = 0
    #: The figure of ``Trainer.metrics`` that ranks them, and whether lower or higher is better.
    best_metric: str = "val_loss"
    best_mode: str = "min"

    def __post_init__(self) -> None:
        if self.every_n_steps is not None:
            epoch_ends = ", or None to write checkpoints at epoch ends only"
            whole_number("checkpoint_every_n_steps", self.every_n_steps, or_else=epoch_ends)
        whole_number("keep_best", self.keep_best, least=0)
        if self.best_mode not in ("min", "max"):
            raise TrainerError(
                f"best_mode={self.best_mode!r} is not accepted: 'min' (lower {self.best_metric} "
                f"is better) or 'max'"
            )


def whole_number(name: str, value: Any, *, least: int = 1, or_else: str = "") -> int:
    """Return ``value`` when it is a whole number >= ``least``; else raise a :class:`TrainerError`.

    A bool is not a whole number. The error names the Trainer's argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise TrainerError(
            f"{name}={value!r} is not accepted: give a whole number >= {least}{or_else}"
        )
    return value


# -- writing ---------------------------------------------------------------------------------


def save_atomic(state: Mapping[str, Any], path: Path, *, last_good: Path | None = None) -> None:
    """Save ``state`` to ``path`` atomically, through a temporary file and ``os.replace``.

    Written with ``torch.save``; a kill at any moment leaves the old file or the new one.

    :param last_good: the checkpoint that stays the one to resume from when this write fails
        (``path`` itself by default), for the error.
    :raises CheckpointError: when the file cannot be written (a full disk, a file-size limit),
        naming ``path``, the cause and ``last_good``, whichever layer of torch reported it.
    """
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}")
    recorded = _RecordingFile(None)
    try:
        with temporary.open("wb") as file:
            recorded = _RecordingFile(file)
            torch.save(dict(state), cast("IO[bytes]", recorded))
            # Not fsync-ed: the replace guards against a kill; an fsync would guard against a
            # power cut too, at a cost of most of the write's time.
            file.flush()
        os.replace(temporary, path)
    except BaseException as exc:  # Ctrl-C too: no half-written temporary file stays
        written = temporary.stat().st_size if temporary.exists() else 0
        cause = None
        if isinstance(exc, Exception):
            cause = recorded.failure or (exc if isinstance(exc, OSError) else None)
            # torch's zip writer may swallow the OSError of a write and raise its own
            # RuntimeError ("unexpected pos") later, when it closes the archive: ask the disk,
            # before the temporary file's space is given back.
            cause = cause or _full_disk_or_limit(path.parent, written)
        temporary.unlink(missing_ok=True)
        if cause is not None:
            raise unwritable(path, cause, last_good=last_good or path) from exc
        raise


#: How the temporary files of checkpoint writes end (``.last.ckpt.<pid>.tmp``).
TEMPORARY_SUFFIX = ".tmp"


class _RecordingFile:
    """A binary file that keeps the first ``OSError`` of its writes.

    torch's writer reports a failed write (``ENOSPC``, ``EFBIG``) as a ``RuntimeError`` of its own
    words."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.failure: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return int(self.file.write(data))
        except OSError as exc:
            self.failure = self.failure or exc
            raise

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as exc:
            self.failure = self.failure or exc
            raise


def _full_disk_or_limit(folder: Path, written: int) -> OSError | None:
    """Return an ``OSError`` for a full disk or a file-size limit, or None.

    The disk is ``folder``'s; the limit one that ``written`` bytes reached."""
    import errno
    import resource

    try:
        stats = os.statvfs(folder)
    except OSError:
        stats = None
    if stats is not None and stats.f_bavail * stats.f_frsize < 64 * 1024:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and written >= limit:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    return None


def _cause(exc: BaseException, folder: Path) -> str:
    """Say why a write failed, in words.

    The error's, and what it means for a full disk or a file-size limit."""
    import errno
    import resource

    words = getattr(exc, "strerror", None) or str(exc)
    number = getattr(exc, "errno", None)
    if number in (errno.ENOSPC, errno.EDQUOT):
        try:
            stats = os.statvfs(folder)
            free = (
                f"{stats.f_bavail * stats.f_frsize} bytes free of {stats.f_blocks * stats.f_frsize}"
            )
        except OSError:
            free = "its free space unknown"
        what = "full" if number == errno.ENOSPC else "over this user's quota"
        return f"{words} (the file system of {folder} is {what}: {free})"
    if number == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        size = "" if limit == resource.RLIM_INFINITY else f" of {limit} bytes"
        return f"{words} (a file-size limit{size}: the job's `ulimit -f`, or the file system's)"
    if number in (errno.ENOENT, errno.ENOTDIR):
        return f"{words} (the folder {folder} was removed or replaced while it was written)"
    if number in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{words} (this process may not write in {folder})"
    return f"{words} (a full disk, or a file-size limit such as the job's?)"


def unwritable(path: Path, exc: BaseException, *, last_good: Path | None = None) -> CheckpointError:
    """Return the error for checkpoint ``path`` that could not be written.

    The cause, and the last good checkpoint (``last_good``, ``path`` by default), which is
    intact."""
    last_good = last_good or path
    kept = "there is no earlier checkpoint to resume from"
    if last_good.is_file():
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last_good.stat().st_mtime))
        kept = f"the last good one, written {written}, is intact at {last_good}"
    return CheckpointError(
        f"cannot write checkpoint {path}: {_cause(exc, path.parent)}; {kept}. Free space or "
        f"raise the limit, then resume with fit(ckpt_path='last')"
    )


def remove_temporaries(folder: Path) -> list[str]:
    """Remove the temporary files that cut-off writes left in run folder ``folder``.

    Cut off by a kill. Returns their names. Called by the folder's only writer (it holds the run's
    lock)."""
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(TEMPORARY_SUFFIX):
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry.name)
    return removed


def load(path: Path, device: torch.device) -> dict[str, Any]:
    """Read a checkpoint with ``torch.load(weights_only=True)``: tensors and plain containers only.

    :raises CheckpointError: for a file that is not a checkpoint of this format.
    """
    import torch

    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch's readers fail on a bad file in many ways (IndexError too)
        raise unreadable(path, exc) from None
    if not isinstance(state, dict) or state.get("format") not in (FORMAT, SHARDED_FORMAT):
        raise CheckpointError(
            f"{path} is not an accelctl.Trainer checkpoint of format {FORMAT} or "
            f"{SHARDED_FORMAT} (its keys: "
            f"{', '.join(sorted(map(str, state))) if isinstance(state, dict) else type(state)})"
        )
    return state


def unreadable(path: Path, exc: BaseException) -> CheckpointError:
    """Return the error for checkpoint ``path`` that ``torch.load`` could not read.

    In the Trainer's words: truncated, not a checkpoint, or refused by ``weights_only``."""
    import zipfile

    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            head = file.read(4)
    except OSError as error:
        return CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}")
    redo = "resume from an earlier checkpoint (a best-*.ckpt, a copy) or start a new run"
    if (head.startswith(b"PK") and not zipfile.is_zipfile(path)) or size == 0:
        return CheckpointError(
            f"checkpoint {path} is truncated ({size} bytes, the end of the archive torch.save "
            f"writes is missing): a write or a copy was cut off. Copy it again if it is a copy; "
            f"else {redo}"
        )
    if not head.startswith((b"PK", b"\x80")):  # neither torch.save's zip archive nor a pickle
        return CheckpointError(
            f"{path} is not a checkpoint: it is neither the zip archive that torch.save writes "
            f"nor a pickle (its first bytes: {head!r}). Give a file written by "
            f"accelctl.Trainer; else {redo}"
        )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CheckpointError(
        f"cannot read checkpoint {path}: {first}. Checkpoints are read with "
        f"torch.load(weights_only=True), which refuses anything but tensors and plain "
        f"containers; give a file written by accelctl.Trainer"
    )


def resumed_batches(
    loader: Iterable[Any], resume: Resume, device: torch.device
) -> Iterator[tuple[int, Any]]:
    """Enumerate ``loader`` from batch ``resume.batches_done`` on, as if training never stopped.

    The epoch's starting states are restored, its first batches read and dropped, then the
    checkpoint's random states restored, as if training had never stopped."""
    if resume.epoch_rng is not None:
        set_epoch_rng_state(resume.epoch_rng, loader, device)
    skip = resume.batches_done
    iterator = iter(loader)
    if not skip:  # the random states now are those the epoch starts from: nothing to replay
        return enumerate(iterator)
    for _ in range(skip):
        try:
            next(iterator)
        except StopIteration:
            raise CheckpointError(
                f"the checkpoint was written after {skip} batches of its epoch, but the training "
                f"loader has fewer; resume with the data the checkpoint was trained on"
            ) from None
    if resume.rng is not None:
        set_rng_state(resume.rng, device)
    return enumerate(iterator, start=skip)


def per_rank(values: Sequence[Any], rank: int, world_size: int, what: str) -> Any | None:
    """Rank ``rank``'s entry of a per-rank list saved by a run of ``len(values)`` processes."""
    if len(values) != world_size:
        warn_user(
            f"the checkpoint's {what} come from {len(values)} process(es), this run has "
            f"{world_size}: weights and optimizer are restored, the random states only where a "
            f"rank matches (an exact continuation needs the same number of processes)"
        )
    return values[rank] if rank < len(values) else None


def _mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """The parameters and buffers where two state dicts disagree ("" when they agree)."""
    shapes = [
        f"{key} is {list(value.shape)} in the checkpoint, {list(current[key].shape)} in the model"
        for key, value in saved.items()
        if key in current and tuple(getattr(value, "shape", ())) != tuple(current[key].shape)
    ]
    missing, extra = sorted(set(current) - set(saved)), sorted(set(saved) - set(current))
    parts = shapes[:5] + [f"and {len(shapes) - 5} more of another shape"] * (len(shapes) > 5)
    for what, keys in (("missing from the checkpoint", missing), ("not in the model", extra)):
        if keys:
            parts.append(f"{what}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}")
    return "; ".join(parts)


# -- one fit's checkpoints -------------------------------------------------------------------


@dataclass(frozen=True)
class LoopState:
    """The training loop's state a checkpoint holds: where a fit resumed from it goes on."""

    #: The epoch to resume in.
    epoch: int
    #: The batches of ``epoch`` already trained (0 at an epoch's end, for the next one).
    batches_done: int
    global_step: int
    #: What decides the data order of ``epoch`` at its start (:func:`.rng.epoch_rng_state`; at
    #: an epoch's end, taken then, for the next one). None where nothing needs it.
    epoch_rng: Mapping[str, Any] | None
    #: The trainer's figures.
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class LastCheckpoint:
    """The last checkpoint a fit wrote or resumed from, for its reports."""

    path: Path
    #: The epoch it resumes in (0-based), and the trainer's step it was written at.
    epoch: int
    step: int


@dataclass(frozen=True)
class RankStates:
    """One process's part of a checkpoint, gathered into rank 0's file."""

    #: The random states now.
    rng: Mapping[str, Any]
    #: What decides the data order of the checkpoint's epoch (:attr:`LoopState.epoch_rng`).
    epoch_rng: Mapping[str, Any] | None
    #: Sharded checkpoints: the new shards' folder, named by rank 0 (None elsewhere).
    folder_id: str | None


@dataclass(frozen=True)
class Resume:
    """Where a fit resumed from a checkpoint starts, for this process."""

    epoch: int
    batches_done: int
    global_step: int
    #: What decides this rank's data order of ``epoch`` at its start (None in a checkpoint of
    #: an older accelctl written at an epoch's end).
    epoch_rng: Mapping[str, Any] | None
    #: This rank's states at the checkpoint.
    rng: Mapping[str, Any] | None
    metrics: dict[str, float]


class Stateful(NamedTuple):
    """What a checkpoint holds the ``state_dict`` of, and restores."""

    model: Any
    optimizer: Any
    #: The gradient scaler of float16 (None otherwise).
    scaler: Any | None = None


class Checkpointer:
    """Writes and reads the checkpoints of one ``fit``'s model, optimizer and gradient scaler.

    Rank 0 writes, every rank reads. ``folder`` is the fit's run folder,
    ``<root_dir>/checkpoints/run-N``.

    :param env: this process's place in the run (the random states of every rank are saved).
    :param device: this process's device (random states, and where a checkpoint is loaded to).
    :param run: the run's id, written into every checkpoint.

    A model sharded by FSDP2 (``strategy="fsdp"``) has sharded checkpoints: every rank writes its
    shards (:mod:`.sharded_checkpoint`) and rank 0 the file that names them.
    """

    def __init__(
        self,
        config: CheckpointConfig,
        folder: Path,
        objects: Stateful,
        *,
        env: ProcessEnvironment,
        device: torch.device,
        run: str,
    ) -> None:
        self.config, self.folder, self.objects = config, folder, objects
        self.rank, self.world_size, self.device, self.run = env.rank, env.world_size, device, run
        # Sharded by FSDP2? (Not imported: no model of this process is; importing costs time.)
        fsdp = sys.modules.get("torch.distributed.fsdp")
        self.sharded = fsdp is not None and isinstance(objects.model, fsdp.FSDPModule)
        self.best = BestCheckpoints(config.keep_best, config.best_mode)
        #: Whether this fit said that its checkpoints cannot restore its loader's order.
        self.told_gap = False
        #: Whether rank 0 removed the temporary files of cut-off writes from ``folder``.
        self.swept = False

    def restore(self, path: Path) -> Resume:
        """Load ``path`` into the model, optimizer and scaler; where and how the fit goes on."""
        model, optimizer, scaler = self.objects
        state = load(path, self.device)
        if "shards" in state:
            self._restore_shards(path, path.parent / state["shards"])
        elif self.sharded:
            raise CheckpointError(
                f"checkpoint {path} holds the whole model in one file (written without "
                f"strategy='fsdp'); a fit with strategy='fsdp' resumes from sharded checkpoints. "
                f"Resume it with the strategy it was written with"
            )
        else:
            self._check_model(path, state["model"])
            try:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
            except (RuntimeError, ValueError, KeyError) as exc:
                raise CheckpointError(
                    f"checkpoint {path} does not fit this model or optimizer: {exc}"
                ) from None
        if scaler is not None and state.get("scaler") is not None:
            scaler.load_state_dict(state["scaler"])
        self.best.kept = [list(item) for item in state.get("best", [])]
        rng = per_rank(state["rng"], self.rank, self.world_size, "random states")
        batches_done = int(state["batches_done"])
        epoch_rng = None
        if state.get("epoch_rng") is not None:
            epoch_rng = per_rank(state["epoch_rng"], self.rank, self.world_size, "data orders")
        return Resume(
            epoch=int(state["epoch"]),
            batches_done=batches_done,
            global_step=int(state["global_step"]),
            epoch_rng=epoch_rng,
            rng=rng,
            metrics={str(k): float(v) for k, v in state.get("metrics", {}).items()},
        )

    def _check_model(self, path: Path, saved: Mapping[str, Any]) -> None:
        """Refuse a checkpoint of another model, naming the tensors that differ."""
        mismatch = _mismatch(saved, self.objects.model.state_dict())
        if mismatch:
            raise CheckpointError(
                f"checkpoint {path} was written for another model: {mismatch}. Resume with the "
                f"model it was trained with, or start a new run (ckpt_path=None)"
            )

    def _restore_shards(self, path: Path, shards: Path) -> None:
        """Load a sharded checkpoint's model and optimizer, resharded to this run's model."""
        if not (shards / ".metadata").is_file():
            raise CheckpointError(
                f"checkpoint {path} is sharded (strategy='fsdp') and its shards are missing: "
                f"{shards} has no .metadata. A sharded checkpoint is the file and the folder it "
                f"names; copy or keep them together"
            )
        self._check_model(path, saved_shapes(shards))
        try:
            load_shards(self.objects.model, self.objects.optimizer, shards)
        except (RuntimeError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(
                f"checkpoint {path} does not fit this model or optimizer: {first}"
            ) from None

    def save(self, loop: LoopState, *, epoch_end: bool = False) -> str | None:
        """Write ``last.ckpt``, and a best one at an epoch's end when it ranks.

        To resume in ``loop.epoch`` after ``loop.batches_done``. Called on every rank: their random
        states are gathered into rank 0's file. The best one's file name when one was kept."""
        gap = loop.epoch_rng.get("gap") if loop.epoch_rng is not None else None
        if gap is not None and not self.told_gap and self.rank == 0:
            warn_user(
                f"the checkpoints of this fit ({self.folder / LAST}) cannot restore the order "
                f"of its training data: {gap}. A fit resumed from one continues in another order"
            )
        self.told_gap = self.told_gap or gap is not None
        if self.rank == 0 and not self.swept:  # what a killed write left, before this fit's own
            remove_temporaries(self.folder)
            self.swept = True
        # Sharded: rank 0 names the new shards' folder, the others learn it with the states.
        folder_id = uuid.uuid4().hex[:12] if self.sharded and self.rank == 0 else None
        mine = RankStates(rng_state(self.device), loop.epoch_rng, folder_id)
        states: list[Any] = [mine]  # per rank
        if self.world_size > 1:
            import torch.distributed as dist

            states = [None] * self.world_size
            dist.all_gather_object(states, mine)
        # Every rank checks the figure (they agree on the figures), so that all of them stop.
        score = self._score(loop.metrics) if epoch_end and self.config.keep_best else None
        if self.sharded:
            return self._save_sharded(states, loop, score)
        if self.rank != 0:
            return None
        model, optimizer, _ = self.objects
        state = self._state(states, loop)
        state.update(model=model.state_dict(), optimizer=optimizer.state_dict())
        best = None
        if score is not None:
            name = best_name(loop.epoch - 1, self.config.best_metric, score)
            offer = self.best.offer(score, name)
            state["best"] = self.best.kept
            if offer.kept:
                save_atomic(state, self.folder / name, last_good=self.folder / LAST)
                best = name
            for old in offer.dropped:
                if old != name:
                    (self.folder / old).unlink(missing_ok=True)
        save_atomic(state, self.folder / LAST)
        return best

    def _save_sharded(
        self, states: list[RankStates], loop: LoopState, score: float | None
    ) -> str | None:
        """Write a sharded checkpoint: every rank's shards, then the file that names them.

        The shards go into a new folder; rank 0 writes the file atomically, then removes the folders
        no file names any more. The best one's file name when one was kept."""
        model, optimizer, _ = self.objects
        folder_id = states[0].folder_id
        assert folder_id is not None  # rank 0 names it when the model is sharded
        name, kept = None, False
        dropped: list[str] = []
        if score is not None:  # every rank: they agree, and all write a kept one's shards
            name = best_name(loop.epoch - 1, self.config.best_metric, score)
            offer = self.best.offer(score, name)
            kept, dropped = offer.kept, offer.dropped
        written = [LAST, name] if kept and name is not None else [LAST]
        for checkpoint in written:
            try:
                save_shards(model, optimizer, shards_folder(self.folder, checkpoint) / folder_id)
            except OSError as exc:  # on every rank: each has every rank's failure
                # DCP may report a failed write in torch's words (no errno): ask the disk.
                cause = exc if exc.errno else _full_disk_or_limit(self.folder, 0) or exc
                last = self.folder / LAST
                raise unwritable(self.folder / checkpoint, cause, last_good=last) from exc
        if self.rank != 0:
            return None
        state = self._state(states, loop)
        state.update(format=SHARDED_FORMAT, strategy="fsdp")
        for checkpoint in reversed(written):  # the best first: last.ckpt is the one to trust
            shards = shards_folder(self.folder, checkpoint)
            save_atomic(
                {**state, "shards": f"{shards.name}/{folder_id}"},
                self.folder / checkpoint,
                last_good=self.folder / LAST,
            )
            prune(shards, keep=folder_id)
        for old in dropped:
            if old != name:
                (self.folder / old).unlink(missing_ok=True)
                prune(shards_folder(self.folder, old), keep=None)
        return name if kept else None

    def _state(self, states: list[RankStates], loop: LoopState) -> dict[str, Any]:
        """The loop's state every checkpoint holds (rank 0's file), from every rank's states."""
        scaler = self.objects.scaler
        return {
            "format": FORMAT,
            "scaler": None if scaler is None else scaler.state_dict(),
            "epoch": loop.epoch,
            "batches_done": loop.batches_done,
            "global_step": loop.global_step,
            "rng": [rank.rng for rank in states],
            "epoch_rng": [rank.epoch_rng for rank in states],
            "metrics": dict(loop.metrics),
            "best": self.best.kept,
            "run": self.run,
            "world_size": self.world_size,
        }

    def _score(self, metrics: Mapping[str, float]) -> float:
        """The figure of an epoch's ``metrics`` that ranks its checkpoint."""
        name = self.config.best_metric
        if name not in metrics:
            raise CheckpointError(
                f"keep_best={self.config.keep_best} ranks checkpoints by best_metric={name!r}, "
                f"which this fit's epochs do not report; they report: {', '.join(sorted(metrics))}"
                f" (validation figures are val_<name> of validation_step's dict)"
            )
        return float(metrics[name])

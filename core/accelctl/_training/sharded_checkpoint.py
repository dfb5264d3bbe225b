"""The model and optimizer of a sharded checkpoint, through ``torch.distributed.checkpoint``.

For ``strategy="fsdp"``; DCP for short.

A sharded checkpoint is two things side by side in ``<root_dir>/checkpoints``: the ``.ckpt`` file
(rank 0's, the loop state as in every checkpoint; ``torch.load``-able, ``weights_only``) and, for
``last.ckpt``, the folder ``last.shards/<id>/`` that the file names (key ``shards``, relative to
the file), where every process writes its shards of the model's and the optimizer's state dicts
(``get_state_dict``). A new checkpoint's shards go to a new ``<id>`` folder; the file, replaced
atomically after all shards are written, then names it, and the folders it no longer names are
removed: a kill at any moment leaves the previous checkpoint whole.

Loading goes through the model's own state dict, whatever its wrapping: DCP reshards, so a
checkpoint of N processes loads into M processes, into a model trained without FSDP, or into one
process without any process group.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


def shards_folder(folder: Path, checkpoint: str) -> Path:
    """Where the shards of checkpoint file ``checkpoint`` (``last.ckpt``) go: ``last.shards``."""
    stem = checkpoint[: -len(".ckpt")] if checkpoint.endswith(".ckpt") else checkpoint
    return folder / f"{stem}.shards"


def save_shards(model: nn.Module, optimizer: Any, target: Path) -> None:
    """Write this process's shards of ``model`` and ``optimizer`` into ``target``.

    Called on every process; returns once all are written and the folder's metadata is there.

    :raises OSError: on every process when any could not write, with the first failure's words.
    """
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save

    model_state, optimizer_state = get_state_dict(model, optimizer)
    # Serial copies to the CPU: DCP's overlapping loader needs torch.<device>.current_stream
    # from any PrivateUse1 backend loaded in the process, a device this fit may not even use.
    # Not fsync-ed, as the one-file checkpoints: the file's atomic replace guards against a kill.
    writer = FileSystemWriter(target, sync_files=False, per_thread_copy_ahead=0)
    try:
        save({"model": model_state, "optimizer": optimizer_state}, storage_writer=writer)
    except CheckpointException as exc:  # a BaseException, holding every rank's failure
        raise _first_failure(exc) from exc


def _first_failure(exc: Any) -> OSError:
    """Return the first rank's failure in DCP's ``CheckpointException`` as an ``OSError``.

    Its ``OSError`` itself (its errno says a full disk from a file-size limit), else an ``OSError``
    of its words."""
    failures = getattr(exc, "failures", None) or {}
    for failure in failures.values():
        inner = failure[0] if isinstance(failure, tuple) else failure  # (exception, stack)
        if isinstance(inner, OSError):
            return inner
        return OSError(str(getattr(inner, "strerror", None) or inner))
    return OSError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def load_shards(model: nn.Module, optimizer: Any, source: Path) -> None:
    """Read the shards in ``source`` into ``model`` and ``optimizer``, resharded to this run.

    Called on every process."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    alone = not (dist.is_available() and dist.is_initialized())  # a plain model, one process
    with warnings.catch_warnings():
        # DCP warns that it assumes one process when there is no group: that is what we mean.
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        load(state, storage_reader=FileSystemReader(source), no_dist=alone)
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)


def saved_shapes(source: Path) -> dict[str, Any]:
    """Return the model's tensors in ``source`` as meta tensors of their saved shapes.

    Global shapes, by name, for comparing with a model before loading."""
    import torch
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    metadata = FileSystemReader(source).read_metadata().state_dict_metadata
    return {
        key[len("model.") :]: torch.empty(tuple(entry.size), device="meta")
        for key, entry in metadata.items()
        if key.startswith("model.") and hasattr(entry, "size")
    }


def prune(shards: Path, keep: str | None) -> None:
    """Remove the folders of ``shards`` other than ``keep``.

    Older checkpoints', and a write that was cut off; ``shards`` itself when nothing is kept."""
    if not shards.is_dir():
        return
    for entry in shards.iterdir():
        if entry.name != keep:
            shutil.rmtree(entry, ignore_errors=True)
    if keep is None:
        shutil.rmtree(shards, ignore_errors=True)

"""Batches and data loaders: moving a batch to the device, sharding a loader across processes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._contract.errors import DataLoaderError

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Sampler


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Return ``batch`` with every tensor in it on ``device``.

    Tensors, and lists, tuples (named ones too) and mappings of them, nested; anything else is
    returned as it is."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        moved = [move_to_device(item, device) for item in batch]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
            return type(batch)(*moved)
        return type(batch)(moved) if isinstance(batch, tuple) else moved
    if isinstance(batch, Mapping):
        return {key: move_to_device(value, device) for key, value in batch.items()}
    return batch


def batch_size(batch: Any) -> int:
    """The samples in ``batch``: the leading size of its first tensor (depth first), else 1."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    items: Iterable[Any] = ()
    if isinstance(batch, (list, tuple)):
        items = batch
    elif isinstance(batch, Mapping):
        items = batch.values()
    for item in items:
        if isinstance(item, (torch.Tensor, list, tuple, Mapping)):
            return batch_size(item)
    return 1


def check_loader(loader: Any, argument: str) -> None:
    """Refuse, before anything is set up, a loader the Trainer cannot iterate.

    :param argument: the ``fit`` argument it came as, for the message.
    :raises DataLoaderError: naming its type and what to pass; for Ray Data's per-worker
        iterator (``ray.train.get_dataset_shard``), the Ray bridge's loader over it.
    """
    if isinstance(loader, Iterable):
        return
    if callable(getattr(loader, "iter_torch_batches", None)):
        raise DataLoaderError(
            f"{argument} is a Ray Data iterator ({type(loader).__name__}), which the Trainer "
            f"cannot iterate itself: pass accelctl.integrations.ray.dataset_loader(shard, "
            f'batch_size=...), a DataLoader over its iter_torch_batches (docs/ray.md, "Ray '
            f'Data"), or a torch DataLoader'
        )
    raise DataLoaderError(
        f"{argument} must be an iterable of batches (a torch DataLoader), got "
        f"{type(loader).__name__}"
    )


def shard_loader(
    loader: Iterable[Any], *, rank: int, world_size: int, train: bool
) -> Iterable[Any]:
    """Rebuild ``loader`` so that process ``rank`` of ``world_size`` sees its own share.

    A ``DistributedSampler`` for training (shuffled when ``loader`` shuffled), every
    ``world_size``-th sample from ``rank`` for evaluation. A loader the user shards already, or any
    for one process, is returned unchanged; one that cannot be sharded is a
    :class:`DataLoaderError`."""
    if world_size == 1:
        return loader
    from torch.utils.data import (
        DataLoader,
        DistributedSampler,
        IterableDataset,
        RandomSampler,
        SequentialSampler,
    )

    if not isinstance(loader, DataLoader):
        raise DataLoaderError(
            f"with several processes the Trainer shards a torch DataLoader, got "
            f"{type(loader).__name__}; wrap the data in torch.utils.data.DataLoader"
        )
    if isinstance(loader.dataset, IterableDataset) or isinstance(
        loader.sampler, DistributedSampler
    ):
        return loader  # the user shards it
    if loader.batch_size is None:
        raise DataLoaderError(
            "with several processes the Trainer shards a DataLoader by its sampler; this one has "
            "a custom batch_sampler. Give the DataLoader a batch_size instead, or shard it "
            "yourself (a DistributedSampler inside your batch sampler)"
        )
    sampler: Sampler[int] | range
    if train:
        if not isinstance(loader.sampler, (RandomSampler, SequentialSampler)):
            raise DataLoaderError(
                f"with several processes the Trainer shards a DataLoader's data; it cannot shard "
                f"its {type(loader.sampler).__name__}. Pass "
                f"sampler=DistributedSampler(dataset) yourself (the Trainer then leaves it alone)"
            )
        shuffle = isinstance(loader.sampler, RandomSampler)
        sampler = DistributedSampler(
            loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffle
        )
    else:
        # Without padding: each sample is seen by exactly one process, so figures summed across
        # processes are exact (torch's DistributedSampler repeats samples to even out the shards,
        # which is right for training, not for evaluation).
        sampler = range(rank, len(loader.dataset), world_size)  # type: ignore[arg-type]
    # A DataLoader like ``loader`` (batching, workers, collation, pinning) on ``sampler``.
    options: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    return DataLoader(loader.dataset, sampler=sampler, **options)


def sampler_parts(loader: Iterable[Any]) -> list[Any]:
    """Return the loader's samplers that an epoch's order is asked of and saved from.

    The loader's sampler, its batch sampler and the batch sampler's sampler (a custom batch
    sampler often wraps a ``DistributedSampler``), those it has, each once: what an epoch's order
    is asked of (``set_epoch``) and saved from (``state_dict``)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    parts: list[Any] = []
    for part in (
        getattr(loader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
    ):
        if part is not None and all(part is not other for other in parts):
            parts.append(part)
    return parts


def set_epoch(loader: Iterable[Any], epoch: int) -> None:
    """Re-seed a distributed sampler's shuffle for ``epoch``.

    The same order on every process: ``set_epoch`` of each of the loader's :func:`sampler_parts`
    that has one."""
    for part in sampler_parts(loader):
        set_part_epoch = getattr(part, "set_epoch", None)
        if callable(set_part_epoch):
            set_part_epoch(epoch)

"""The random states a checkpoint saves, and what an epoch's data order depends on.

See :func:`rng_state` and :func:`epoch_rng_state` (a shuffling ``DataLoader`` seeds from the global
generator when its iterator starts, or from its own generators; a sampler may keep a state of its
own), which a resumed fit restores before the epoch's iterator starts. All are tensors and plain
values."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._contract.errors import warn_user
from .data import sampler_parts

if TYPE_CHECKING:
    import torch


def _device_module(device: torch.device) -> Any | None:
    """``torch.cuda`` and the like, when it has per-device random states."""
    import torch

    module = None if device.type == "cpu" else getattr(torch, device.type, None)
    return module if callable(getattr(module, "get_rng_state", None)) else None


def _torch_state(device: torch.device) -> dict[str, Any]:
    """Return torch's global random state, and the device's where it has its own.

    The device's comes with its device type: another type's generator keeps its state in
    another form."""
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    module = _device_module(device)
    if module is not None:
        state["device"] = module.get_rng_state(device.index or 0).cpu()
        state["device_type"] = device.type
    return state


def _set_torch_state(state: Mapping[str, Any], device: torch.device) -> None:
    """Restore what :func:`_torch_state` saved.

    The device's state only on a device of the type that saved it (a checkpoint of an older accelctl
    names none: its own, as it was read)."""
    import torch

    torch.set_rng_state(state["torch"].cpu())
    module = _device_module(device)
    same_type = state.get("device_type", device.type) == device.type
    if module is not None and "device" in state and same_type:
        module.set_rng_state(state["device"].cpu(), device.index or 0)


def _generators(loader: Iterable[Any]) -> list[torch.Generator]:
    """The loader's own generators (its ``generator`` and its sampler's), each once."""
    import torch

    found: list[torch.Generator] = []
    for owner in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's random states as tensors and plain values (``weights_only``-loadable)."""
    import torch

    state = {**_torch_state(device), "python": random.getstate()}
    try:
        import numpy
    except ImportError:
        pass
    else:
        kind, keys, position, has_gauss, gauss = numpy.random.get_state(legacy=True)
        state["numpy"] = [
            kind,
            torch.from_numpy(numpy.asarray(keys).astype("int64")),
            int(position),
            int(has_gauss),
            float(gauss),
        ]
    return state


def set_rng_state(state: Mapping[str, Any], device: torch.device) -> None:
    """Restore what :func:`rng_state` saved (a part saved on another kind of machine is skipped)."""
    _set_torch_state(state, device)
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        try:
            import numpy
        except ImportError:
            return
        kind, keys, position, has_gauss, gauss = state["numpy"]
        keys = keys.cpu().numpy()  # the checkpoint is mapped onto the training device
        numpy.random.set_state((kind, keys.astype("uint32"), position, has_gauss, gauss))


def _stateful_parts(loader: Iterable[Any]) -> list[Any]:
    """Return the parts of ``loader`` its order may depend on that save their own state.

    Those with ``state_dict()`` and ``load_state_dict()``: its sampler, batch sampler and the batch
    sampler's sampler, an iterable dataset; a loader that is not a ``DataLoader`` itself. Each
    once, in that order."""
    from torch.utils.data import DataLoader

    candidates = [*sampler_parts(loader), getattr(loader, "dataset", None)]
    if not isinstance(loader, DataLoader):
        candidates.append(loader)
    found: list[Any] = []
    for part in candidates:
        stateful = callable(getattr(part, "state_dict", None)) and callable(
            getattr(part, "load_state_dict", None)
        )
        if stateful and all(part is not other for other in found):
            found.append(part)
    return found


def order_gap(loader: Iterable[Any]) -> str | None:
    """Why a resumed fit cannot restore ``loader``'s data order, in words (None: it can).

    A loader's order is restored when it depends on the random states a checkpoint holds (torch's
    global generator, the loader's and its sampler's own), on the epoch (``set_epoch``), or on a
    part that saves its state (:func:`_stateful_parts`). An iterator is read once; an iterable
    dataset, or an iterable that is not a ``DataLoader``, without a ``state_dict`` may draw its
    order from anywhere.
    """
    from collections.abc import Iterator, Sequence

    from torch.utils.data import DataLoader, IterableDataset

    if isinstance(loader, Iterator):
        return (
            f"the training loader is an iterator ({type(loader).__name__}), which is read once: "
            f"a resumed fit cannot read its batches again in their order"
        )
    stateful = _stateful_parts(loader)
    if isinstance(loader, DataLoader):
        dataset = loader.dataset
        if isinstance(dataset, IterableDataset) and all(dataset is not p for p in stateful):
            return (
                f"the training loader's dataset is an IterableDataset "
                f"({type(dataset).__name__}) without state_dict() and load_state_dict(): its "
                f"order is restored only where it depends on torch's global random state alone"
            )
        return None
    if isinstance(loader, Sequence) or stateful:
        return None
    return (
        f"the training loader ({type(loader).__name__}) is neither a torch DataLoader, a "
        f"sequence, nor has state_dict() and load_state_dict(): its order is restored only where "
        f"it depends on torch's global random state alone"
    )


def epoch_rng_state(loader: Iterable[Any], device: torch.device) -> dict[str, Any]:
    """Return what an epoch's data order depends on, taken before its iterator starts.

    The random states, the loader's own generators, the state of its parts that save one, and
    (``gap``) why its order cannot be restored, when it cannot."""
    generators = [generator.get_state() for generator in _generators(loader)]
    parts = [part.state_dict() for part in _stateful_parts(loader)]
    state = {**_torch_state(device), "generators": generators, "parts": parts}
    gap = order_gap(loader)
    if gap is not None:
        state["gap"] = gap
    return state


def set_epoch_rng_state(
    state: Mapping[str, Any], loader: Iterable[Any], device: torch.device
) -> None:
    """Restore :func:`epoch_rng_state`'s states before an epoch's iterator starts."""
    _set_torch_state(state, device)
    generators = _generators(loader)
    saved = state.get("generators", [])
    if len(saved) != len(generators):
        warn_user(
            f"the training loader has {len(generators)} generator(s) of its own, its checkpoint "
            f"{len(saved)}: the resumed epoch may see its batches in another order"
        )
    for generator, generator_state in zip(generators, saved, strict=False):
        generator.set_state(generator_state.cpu())
    parts, saved_parts = _stateful_parts(loader), state.get("parts", [])
    if "parts" in state and len(parts) != len(saved_parts):
        warn_user(
            f"the training loader has {len(parts)} part(s) with a state_dict (sampler, batch "
            f"sampler, dataset), its checkpoint {len(saved_parts)}: the resumed epoch may see "
            f"its batches in another order"
        )
    for part, part_state in zip(parts, saved_parts, strict=False):
        part.load_state_dict(part_state)
    if "gap" in state:
        warn_user(
            f"resuming into a data order that may differ from the interrupted run's: "
            f"{state['gap']}; the resumed run is not an exact continuation"
        )

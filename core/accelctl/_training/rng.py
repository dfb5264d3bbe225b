"""The random states a checkpoint saves (:func:`rng_state`), and those an epoch's data order
depends on (:func:`epoch_rng_state`: a shuffling ``DataLoader`` seeds from the global generator
when its iterator starts), which a fit resumed mid-epoch replays. All are tensors and plain values.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import warn_user

if TYPE_CHECKING:
    import torch


def _device_module(device: torch.device) -> Any | None:
    """``torch.cuda`` and the like, when it has per-device random states."""
    import torch

    module = None if device.type == "cpu" else getattr(torch, device.type, None)
    return module if callable(getattr(module, "get_rng_state", None)) else None


def _torch_state(device: torch.device) -> dict[str, Any]:
    """torch's global random state, and the device's where it has its own (with its device
    type: another type's generator keeps its state in another form)."""
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    module = _device_module(device)
    if module is not None:
        state["device"] = module.get_rng_state(device.index or 0).cpu()
        state["device_type"] = device.type
    return state


def _set_torch_state(state: Mapping[str, Any], device: torch.device) -> None:
    """Restore what :func:`_torch_state` saved; the device's state only on a device of the type
    that saved it (a checkpoint of an older accelctl names none: its own, as it was read)."""
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


def epoch_rng_state(loader: Iterable[Any], device: torch.device) -> dict[str, Any]:
    """What an epoch's data order depends on, taken before its iterator starts."""
    generators = [generator.get_state() for generator in _generators(loader)]
    return {**_torch_state(device), "generators": generators}


def set_epoch_rng_state(
    state: Mapping[str, Any], loader: Iterable[Any], device: torch.device
) -> None:
    """Restore :func:`epoch_rng_state`'s states before an epoch's iterator is replayed."""
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

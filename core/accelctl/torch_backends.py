"""The out-of-tree torch backends that ``import torch`` loads, from accelctl's one scan.

They are ``import torch``'s ``torch.backends`` entry points; the scan of the installed distributions
that finds the plugins finds them too, so a plugin that asks (the generic PrivateUse1 plugin, on
each probe) costs no second pass over the installed distributions.

Its own module, apart from :mod:`accelctl.torch_build` (which reads torch's build and imports
torch, and which the base class :class:`accelctl.Accelerator` uses): this one asks the registry,
a layer above the plugins' base class.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._host.discovery import read_identity
from ._host.registry import get_registry

__all__ = ["BackendEntryPoint", "backend_entry_points", "plugin_distributions"]


class BackendEntryPoint(NamedTuple):
    """A ``torch.backends`` entry point: an out-of-tree backend that ``import torch`` loads."""

    name: str
    #: ``"module:attribute"``.
    value: str
    #: The distribution that declares it and its version (None where its metadata is unreadable).
    distribution: str | None
    version: str | None


def backend_entry_points() -> list[BackendEntryPoint]:
    """Return every installed ``torch.backends`` entry point, from accelctl's one scan.

    The scan is the process-wide registry's, which finds the plugins too: a plugin that asks costs
    no second pass over them, and asking again reads no file."""
    registry = get_registry()
    if _backends[0] is not registry:  # read once per registry (a new one scans again)
        entries = []
        for found in registry.torch_backends():
            distribution, version, _ = read_identity(found.origin)
            entries.append(BackendEntryPoint(found.name, found.value, distribution, version))
        _backends[:] = [registry, entries]
    return list(_backends[1])


_backends: list[Any] = [None, []]  # the registry read last, and its entries


def plugin_distributions(name: str) -> list[str]:
    """Return the distributions whose ``accelctl.accelerators`` entry point is called ``name``.

    ``name`` in any case, from the same scan: a plugin that serves a backend by its name (the
    generic PrivateUse1 one) asks whether a dedicated plugin claims it, without a second pass."""
    return [handle.distribution or "?" for handle in get_registry().claimants(name)]

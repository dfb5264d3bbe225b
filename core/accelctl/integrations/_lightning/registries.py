"""Lightning's accelerator registries, filled with accelctl's plugins.

The Trainer's and Fabric's, filled by :func:`accelctl.integrations.lightning.register_all`: which
names accelctl may take, and what it did, as plain data."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as FABRIC_REGISTRY
from lightning.fabric.accelerators.registry import _AcceleratorRegistry
from lightning.pytorch.accelerators import AcceleratorRegistry as TRAINER_REGISTRY

from accelctl import AccelctlError, AcceleratorHandle, PluginWarning
from accelctl._host.registry import Registry  # the same distribution: released with the core


def description(handle: AcceleratorHandle) -> str:
    """The registry entry's description: the plugin's own, and where it comes from."""
    try:
        text = handle.info.description
    except AccelctlError:
        text = ""
    source = f"{handle.distribution} {handle.version}" if handle.distribution else "accelctl"
    return f"{text or handle.name} (accelctl plugin, {source})"


@dataclass
class Registration:
    """What :func:`~accelctl.integrations.lightning.register_all` did, as plain data.

    - ``registered``: names now served by accelctl in Lightning's registries;
    - ``aliases``: alias -> the registered name it serves too (``"privateuse1": "openreg"``);
    - ``skipped``: name or alias -> why it was left alone (Lightning has it, or it is disabled);
    - ``broken``: name -> the plugin's one-line error (also emitted as a
      :class:`~accelctl.PluginWarning`).
    """

    registered: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "registered": list(self.registered),
            "aliases": dict(self.aliases),
            "skipped": dict(self.skipped),
            "broken": dict(self.broken),
        }


def _owner(registry: _AcceleratorRegistry, name: str) -> object | None:
    # dict.get: the registry's own get() instantiates the accelerator.
    entry = dict.get(registry, name)
    return None if entry is None else entry.get("accelerator")


def register(
    source: Registry,
    bind: Callable[[AcceleratorHandle], Any],
    is_ours: Callable[[object], bool],
    override: bool,
) -> Registration:
    """Register every plugin of ``source`` in both of Lightning's registries.

    Each as ``bind(handle)``, a class whose ``register_accelerators`` registers it. Names held by a
    class that ``is_ours`` rejects are Lightning's or another package's, left alone unless
    ``override``."""
    result = Registration()
    targets = (TRAINER_REGISTRY, FABRIC_REGISTRY)
    canonical = set(source.names())
    for plugin_name in source.names():
        blocked = source.claimants(plugin_name)[0].reason
        if blocked:
            result.skipped[plugin_name] = blocked
            continue
        try:
            handle = source.get(plugin_name)
        except AccelctlError as exc:
            message = " ".join(str(exc).split())
            result.broken[plugin_name] = message
            warnings.warn(f"not registering with Lightning: {message}", PluginWarning, stacklevel=3)
            continue
        # The accelerator's name (the generic PrivateUse1 plugin's "openreg"), as accelctl shows it.
        name = handle.name
        taken = _taken_by_others(name, is_ours)
        if taken and not override:
            result.skipped[name] = taken
            continue
        bound = bind(handle)
        for target in targets:
            bound.register_accelerators(target)
        result.registered.append(name)
        # The other names accelctl's own lookups take: its aliases (the CUDA plugin's "rocm") and
        # the plugin's own name ("privateuse1"); another plugin's name wins, as it does there.
        try:
            aliases = handle.info.aliases
        except AccelctlError:  # accelerator_info() fails: its name alone (it says why when used)
            aliases = ()
        for alias in dict.fromkeys((*aliases, plugin_name)):
            if alias == name or (alias in canonical and alias != plugin_name):
                continue
            taken = _taken_by_others(alias, is_ours)
            if taken and not override:
                result.skipped[alias] = taken
                continue
            for target in targets:
                target.register(alias, bound, description=description(handle), override=True)
            result.aliases[alias] = name
    return result


def _taken_by_others(name: str, is_ours: Callable[[object], bool]) -> str | None:
    """Say why ``name`` is left alone; None when it is free or accelctl's.

    Lightning (or another package) has it; None when it is free or accelctl's."""
    for target in (TRAINER_REGISTRY, FABRIC_REGISTRY):
        owner = _owner(target, name) if name in target else None
        if name in target and not is_ours(owner):
            owner_name = getattr(owner, "__qualname__", type(owner).__name__)
            return (
                f"Lightning already has {name!r} ({owner_name}); register_all(override=True) "
                f"replaces it, LightningAccelerator({name!r}) uses accelctl's without replacing"
            )
    return None

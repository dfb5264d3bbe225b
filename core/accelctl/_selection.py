"""Selecting what to run on: an accelerator (name, alias, "gpu", "auto", instance), its devices."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._accelerator import Accelerator
from ._config import Settings
from ._deadline import run_all
from ._errors import (
    AccelctlError,
    AcceleratorTypeError,
    AcceleratorUnavailableError,
    DeviceSpecError,
    PluginWarning,
    fresh_copy,
)
from ._handle import AcceleratorHandle
from ._project import ENV_ACCELERATOR, ENV_DEVICES, ENV_DISABLE, ENV_PLUGINS, PROJECT_NAME
from ._registry import Registry, get_registry
from ._text import quote, safe_repr

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Selection:
    """What a Trainer runs on: the accelerator's handle and one device per process."""

    accelerator: AcceleratorHandle
    devices: list[torch.device]
    #: What the plugin's ``parse_devices`` returned (a count or indices).
    parsed: int | list[int]

    @property
    def distributed_backend(self) -> str | None:
        """The ``torch.distributed`` backend for several processes; None: one process only."""
        return self.accelerator.info.distributed_backend

    @property
    def world_size(self) -> int:
        """Processes on this machine: one per device."""
        return len(self.devices)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``accelerator``, ``devices`` (as strings), ``distributed_backend``..."""
        return {
            "accelerator": self.accelerator.name,
            "devices": [str(device) for device in self.devices],
            "device_count": len(self.devices),
            "distributed_backend": self.distributed_backend,
            "family": self.accelerator.info.family,
            "distribution": self.accelerator.distribution,
            "version": self.accelerator.version,
        }


def _skip(exc: AccelctlError) -> None:
    """A candidate of "auto"/"gpu" whose hook broke is skipped, never silently."""
    warnings.warn(f"skipping {exc}", PluginWarning, stacklevel=4)


def _rank(handle: AcceleratorHandle) -> tuple[int, bool]:
    """A candidate's priority and whether it is detected (run in a worker, see _best)."""
    return handle.info.priority, handle.detect()


def _best(handles: list[AcceleratorHandle]) -> AcceleratorHandle | None:
    """The detected candidate of highest priority. The candidates are asked concurrently, each
    hook call under the deadline; a plugin whose hook breaks (or does not answer) is skipped,
    loudly."""
    candidates = []
    outcomes = run_all([functools.partial(_rank, handle) for handle in handles])
    for handle, outcome in zip(handles, outcomes, strict=True):
        if isinstance(outcome.error, AccelctlError):
            _skip(outcome.error)
            continue
        priority, available = outcome.unwrap()
        if available:
            candidates.append((-priority, handle.name, handle))
    return min(candidates, key=lambda c: (c[0], c[1]))[2] if candidates else None


def _why(handle: AcceleratorHandle) -> str:
    try:
        if handle.detect():
            return "available"
        return handle.unavailable_reason() or "not detected"
    except AccelctlError as exc:
        return f"broken: {exc}"


def select_accelerator(
    accelerator: Any = "auto",
    *,
    registry: Registry | None = None,
    environ: Mapping[str, str] | None = None,
) -> AcceleratorHandle:
    """The accelerator for ``accelerator`` (section "Selecting an accelerator" of the docs).

    - ``"auto"``: ``ACCELCTL_ACCELERATOR`` when set; else the available accelerator of highest
      priority (CPU is the floor).
    - ``"gpu"``: the available accelerator of family ``"gpu"`` with the highest priority.
    - a name or alias (any case): that accelerator, which must be available.
    - an :class:`~accelctl.Accelerator` instance, a handle or another plugin object: used as it is.

    ``ACCELCTL_ACCELERATOR`` is read from ``environ`` (default: ``os.environ``) when the call
    starts, before any plugin code runs, so no plugin can change what this call selects.
    """
    return _select(accelerator, registry or get_registry(), Settings.from_environ(environ))


def _select(accelerator: Any, registry: Registry, settings: Settings) -> AcceleratorHandle:
    if not isinstance(accelerator, str):
        _check_plugin_object(accelerator)
        return AcceleratorHandle.from_object(accelerator)
    key = accelerator.strip().lower()
    if key == "auto":
        override = settings.accelerator
        if override and override.lower() != "auto":
            try:
                return _select(override, registry, Settings())
            except AccelctlError as exc:
                # The user asked for "auto": say where the name came from, and the way out.
                raise fresh_copy(
                    exc,
                    f'{ENV_ACCELERATOR}={quote(override)} sets what accelerator="auto" means, '
                    f"and: {str(exc).rstrip('.')}. Unset {ENV_ACCELERATOR} to choose "
                    "automatically.",
                ) from exc
        return _select_auto(registry)
    if key == "gpu":
        return _select_gpu(registry)
    handle = registry.get(key)
    if not handle.detect():
        reason = handle.unavailable_reason()
        because = f": {reason}" if reason else " (not detected)"
        raise AcceleratorUnavailableError(
            f"accelerator {handle.name!r} is installed but not available here{because}. "
            f'Use accelerator="auto" to take what is available, or `accelctl list` to see why',
            name=handle.name,
            reason=reason,
        )
    return handle


#: What ``accelerator=`` accepts, for the error a wrong type gets.
ACCEPTED_ACCELERATORS = (
    '"auto", "gpu", an accelerator\'s name or alias (a str), an accelctl.Accelerator instance, '
    "an AcceleratorHandle, or a plugin object with @accelctl.hookimpl functions"
)


def _check_plugin_object(accelerator: object) -> None:
    """Refuse, as the caller's mistake, what is no plugin object at all (a ``torch.device``,
    None, a number, a list): it would otherwise be loaded and blamed as a broken plugin."""
    if isinstance(accelerator, (AcceleratorHandle, Accelerator)) or (
        isinstance(accelerator, type) and issubclass(accelerator, Accelerator)
    ):
        return
    if not isinstance(accelerator, (type(None), bool, int, float, complex, list, tuple, dict)):
        if any(
            hasattr(getattr(accelerator, attr, None), f"{PROJECT_NAME}_impl")
            for attr in dir(accelerator)
        ):
            return  # a module or object with @accelctl.hookimpl functions
    hint = ""
    device_type = getattr(accelerator, "type", None)
    if type(accelerator).__name__ == "device" and isinstance(device_type, str):
        index = getattr(accelerator, "index", None)
        devices = "" if index is None else f", devices=[{index}]"
        hint = f" For a torch.device, pass its type: accelerator={device_type!r}{devices}."
    raise AcceleratorTypeError(
        f"accelerator={safe_repr(accelerator)} ({type(accelerator).__name__}) is not an "
        "accelerator; "
        f"accepted: {ACCEPTED_ACCELERATORS}.{hint}"
    )


def _select_auto(registry: Registry) -> AcceleratorHandle:
    handles = registry.usable()
    best = _best(handles)
    if best is None:
        installed = ", ".join(f"{h.name} ({_why(h)})" for h in handles) or "none"
        disabled = registry.disabled_names()
        if disabled:
            advice = (
                f"disabled by {ENV_PLUGINS}/{ENV_DISABLE}: {', '.join(disabled)}; "
                "enable one (cpu is the floor)"
            )
        else:
            advice = "install the CPU plugin: pip install accelctl-cpu"
        raise AcceleratorUnavailableError(
            f'accelerator="auto" found no available accelerator (enabled and loadable: '
            f"{installed}); {advice}",
            name="auto",
        )
    return best


def _select_gpu(registry: Registry) -> AcceleratorHandle:
    gpus = []
    broken = []
    for handle in registry.usable():
        try:
            if handle.info.family == "gpu":
                gpus.append(handle)
        except AccelctlError as exc:
            _skip(exc)
            broken.append(f"{handle.name}: broken: {exc}")
    best = _best(gpus)
    if best is None:
        if gpus or broken:
            why = "; ".join([f"{h.name}: {_why(h)}" for h in gpus] + broken)
            message = (
                f'accelerator="gpu" found no available gpu-family accelerator ({why}). '
                'Use accelerator="cpu" to run on the CPU'
            )
        else:
            message = (
                'accelerator="gpu" found no gpu-family accelerator installed; install one: '
                "pip install accelctl-cuda (NVIDIA, AMD ROCm) or accelctl-mps (Apple silicon)"
            )
        raise AcceleratorUnavailableError(message, name="gpu")
    return best


def resolve(
    accelerator: Any = "auto",
    devices: Any = "auto",
    *,
    registry: Registry | None = None,
    environ: Mapping[str, str] | None = None,
) -> Selection:
    """Choose the accelerator and its devices, as a Trainer does.

    :param accelerator: ``"auto"``, ``"gpu"``, a name or alias (any case), or an instance.
    :param devices: a devices spec; ``"auto"`` means ``ACCELCTL_DEVICES`` when it is set, else
        every visible device of an accelerator with a distributed backend, and the first visible
        device of one that runs in a single process.
    :param environ: where ``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES`` are read (default:
        ``os.environ``), once, when the call starts: before any plugin code runs.
    :returns: a :class:`Selection`.
    :raises UnknownAcceleratorError, AcceleratorUnavailableError, PluginLoadError,
        DeviceSpecError: each with a message that says what to do.
    """
    settings = Settings.from_environ(environ)  # now, before any plugin code runs
    handle = _select(accelerator, registry or get_registry(), settings)
    automatic = isinstance(devices, str) and devices.strip().lower() == "auto"
    from_environ = ""
    if automatic and settings.devices:
        devices = from_environ = settings.devices
        automatic = False
    try:
        parsed = handle.parse_devices(devices)
    except DeviceSpecError as exc:
        if not from_environ:
            raise
        # The user asked for "auto": say where the spec came from, on a copy of the error.
        raise fresh_copy(
            exc,
            f'{ENV_DEVICES}={quote(from_environ)} sets what devices="auto" means, and: '
            f"{str(exc).rstrip('.')}. Unset {ENV_DEVICES} or give it an accepted spec.",
        ) from exc
    if automatic and handle.info.distributed_backend is None:
        parsed = single_process(parsed)
    return Selection(accelerator=handle, devices=handle.get_parallel_devices(parsed), parsed=parsed)


def single_process(parsed: int | list[int]) -> int | list[int]:
    """What ``devices="auto"`` keeps of a parse on an accelerator that runs in one process (no
    ``distributed_backend``): its first device. Every visible device stays reachable by an
    explicit spec (``"1,"``); only the automatic choice is bounded, so that "auto" never selects
    a setup that cannot run."""
    return min(parsed, 1) if isinstance(parsed, int) else parsed[:1]

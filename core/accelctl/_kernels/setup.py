"""What accelctl does about a device's kernels in a process that trains on it.

Once, where the Trainer, ``accelctl launch``'s children or a bridge set the device up
(:func:`set_up_kernels`).

- ``ACCELCTL_CPU_FALLBACK=1`` on a PrivateUse1 backend: accelctl's CPU kernels
  (:mod:`.fallback`); on a device whose plugin names torch's own switch (MPS): that switch,
  which torch reads when it is imported; elsewhere (CUDA, the CPU): nothing, and a warning says
  so where a device has no such switch.
- Without it: the operators the plugin declares missing whose kernel the backend registered
  anyway (a placeholder that returns no result) stop at their first call with
  :class:`~accelctl.MissingKernelError`, not with garbage or a later error that names nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._contract import settings
from .._contract.errors import AccelctlError, CPUFallbackWarning, PluginWarning, warn_user
from .._contract.kernel_error import MissingKernelError
from .._contract.kernel_gaps import KernelGaps, shown_op
from .fallback import CPUFallback, _never, _overload, fallback_refusal

if TYPE_CHECKING:
    import torch

    from .._host.handle import AcceleratorHandle

#: ``"accelctl"``: accelctl's CPU kernels; ``"torch"``: torch's own switch is on; ``"off"``:
#: the switch is off; ``"none"``: on, but nothing here can run the device's missing kernels.
FallbackState = Literal["accelctl", "torch", "off", "none"]


@dataclass(frozen=True)
class KernelSetup:
    """What :func:`set_up_kernels` did for one device type in this process."""

    device_type: str
    accelerator: str
    fallback: FallbackState
    gaps: KernelGaps = field(default_factory=KernelGaps)
    #: Why ``ACCELCTL_CPU_FALLBACK=1`` cannot help on this device (None where it can).
    unavailable: str | None = None
    #: The setting that runs the device's missing kernels on the CPU, for the error's advice.
    switch: str = f"{settings.CPU_FALLBACK}=1"
    #: The operators given a refusing kernel (declared missing, switch off).
    guarded: tuple[str, ...] = ()


_lock = threading.Lock()
#: device type -> what was done for it in this process.
_SETUPS: dict[str, KernelSetup] = {}
#: device type -> its CPU fallback (the registrations live as long as it).
_FALLBACKS: dict[str, CPUFallback] = {}
#: device type -> the refusing kernels' libraries.
_GUARDS: dict[str, list[Any]] = {}


def set_up_kernels(
    accelerator: AcceleratorHandle, device: torch.device, *, rank: int | None = None
) -> KernelSetup:
    """Set this process up for the kernels ``device`` lacks, once per device type.

    See the module's docstring. Later calls return the first one's setup.

    :param rank: the process's rank (its warnings are rank 0's); None: ``RANK``, else 0.
    :raises SettingError: for an ``ACCELCTL_CPU_FALLBACK`` that is neither on nor off.
    """
    wanted = settings.cpu_fallback()
    kind = device.type
    with _lock:
        if kind in _SETUPS:
            return _SETUPS[kind]
        setup = _set_up(accelerator, device, wanted, _rank(rank))
        _SETUPS[kind] = setup
        return setup


def setup_for(device_type: str) -> KernelSetup | None:
    """What :func:`set_up_kernels` did for ``device_type`` in this process; None: nothing yet."""
    return _SETUPS.get(device_type)


def fallback_calls(device_type: str) -> int | None:
    """Return the calls that ran on the CPU in place of missing kernels, or None.

    In this process, for ``device_type``; None where accelctl's fallback is not on for it."""
    fallback = _FALLBACKS.get(device_type)
    return None if fallback is None else fallback.total_calls


def fallback_calls_by_op(device_type: str) -> dict[str, int] | None:
    """:func:`fallback_calls` by operator (torch's names); None where the fallback is off."""
    fallback = _FALLBACKS.get(device_type)
    if fallback is None:
        return None
    with fallback._lock:
        return dict(fallback.calls)


def with_fallback_calls(stats: dict[str, int | float], device_type: str) -> dict[str, int | float]:
    """``stats`` with ``cpu_fallback_calls`` where accelctl's fallback is on for the device."""
    calls = fallback_calls(device_type)
    return stats if calls is None else {**stats, "cpu_fallback_calls": calls}


def _rank(rank: int | None) -> int:
    if rank is not None:
        return rank
    raw = os.environ.get("RANK", "").strip()
    return int(raw) if raw.isdigit() else 0


def _set_up(
    accelerator: AcceleratorHandle, device: torch.device, wanted: bool, rank: int
) -> KernelSetup:
    kind, name = device.type, accelerator.plugin_name
    if kind == "cpu":
        return KernelSetup(kind, name, "off" if not wanted else "none", unavailable=_ON_CPU)
    gaps = _gaps_of(accelerator)
    private = kind == _privateuse1_name()
    if private:
        if not wanted:
            guarded = _guard(accelerator, kind, gaps, gaps.missing)
            return KernelSetup(kind, name, "off", gaps, guarded=guarded)
        fallback = CPUFallback(kind, gaps, warn=rank == 0)
        fallback.install()
        _FALLBACKS[kind] = fallback
        # A placeholder the plugin forbids to run on the CPU still stops at its first call.
        kept = tuple(op for op in gaps.missing if not gaps.allows_fallback(op))
        guarded = _guard(accelerator, kind, gaps, kept)
        return KernelSetup(kind, name, "accelctl", gaps, guarded=guarded)
    variable = gaps.fallback_variable
    if variable is not None:
        switch = f"{variable}=1"
        if settings.switched_on(os.environ.get(variable, "")):
            return KernelSetup(kind, name, "torch", gaps, switch=switch)
        why = (
            f"torch reads {variable} when it is imported, and this process imported it without "
            f"it: set {switch} before the script starts (accelctl launch sets it)"
        )
        if wanted and rank == 0:
            warn_user(f"{settings.CPU_FALLBACK}=1 on {kind}: {why}", CPUFallbackWarning)
        return KernelSetup(
            kind, name, "off" if not wanted else "none", gaps, unavailable=why, switch=switch
        )
    why = _neither(kind)
    if wanted and rank == 0:
        warn_user(
            f"{settings.CPU_FALLBACK}=1 does nothing on {kind} ({name}): {why}",
            CPUFallbackWarning,
        )
    return KernelSetup(kind, name, "off" if not wanted else "none", gaps, unavailable=why)


_ON_CPU = "the model already runs on the CPU"


def _neither(kind: str) -> str:
    return (
        f"it serves out-of-tree (PrivateUse1) backends and devices whose plugin names torch's own "
        f"switch; {kind} is neither"
    )


def fallback_refusal_on(device_type: str, kernel: str, gaps: KernelGaps) -> str | None:
    """Say why ``ACCELCTL_CPU_FALLBACK=1`` would not run ``kernel`` on the CPU; None where it would.

    ``kernel`` is torch's name. In a process that trains on ``device_type``, as
    :func:`set_up_kernels` would set it up there (and, on a PrivateUse1 backend, as
    :func:`.fallback.fallback_refusal` says). torch's own switch (``gaps.fallback_variable``) is
    taken to cover what it is asked."""
    if device_type == "cpu":
        return _ON_CPU
    if device_type == _privateuse1_name():
        return fallback_refusal(kernel, gaps)
    if not gaps.allows_fallback(kernel):
        return _never(kernel)
    if gaps.fallback_variable is not None:
        return None
    return _neither(device_type)


def _gaps_of(accelerator: AcceleratorHandle) -> KernelGaps:
    """Return the plugin's declared gaps; a broken hook counts as none declared.

    A hook that breaks is warned about: a broken plugin never stops the training on its own."""
    try:
        return accelerator.kernel_gaps()
    except AccelctlError as exc:
        warn_user(f"no kernel gaps declared for this run: {exc}", PluginWarning)
        return KernelGaps()


def _privateuse1_name() -> str | None:
    import torch

    read = getattr(torch._C, "_get_privateuse1_backend_name", None)
    return None if read is None else str(read())


def _guard(
    accelerator: AcceleratorHandle, kind: str, gaps: KernelGaps, kernels: tuple[str, ...]
) -> tuple[str, ...]:
    """Register a refusing kernel for each declared missing kernel that has a placeholder.

    ``kernels`` are those declared missing; the placeholder is the backend's. An operator
    without any kernel stops by itself."""
    from .fallback import _has_own_kernel, _quietly, library

    guarded: list[str] = []
    libraries: list[Any] = []
    with _quietly():
        for kernel in kernels:
            if _overload(kernel) is None or not _has_own_kernel(kernel):
                continue
            namespace, rest = kernel.split("::", 1)
            made = library(namespace)
            made.impl(rest, _refusal(accelerator.plugin_name, kind, kernel, gaps), "PrivateUse1")
            libraries.append(made)
            guarded.append(kernel)
    _GUARDS[kind] = libraries
    return tuple(guarded)


def _refusal(name: str, kind: str, kernel: str, gaps: KernelGaps) -> Callable[..., Any]:
    op, phase = shown_op(kernel)
    fallback = (
        None
        if gaps.allows_fallback(kernel)
        else f"the plugin {name} declares that {kernel} must never run there"
    )

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise MissingKernelError(
            op=op,
            kernel=kernel,
            device=_device_in(args, kwargs, kind),
            accelerator=name,
            phase=phase,
            fallback=fallback,
        )

    return refuse


def _device_in(args: tuple[Any, ...], kwargs: Mapping[str, Any], kind: str) -> str:
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.device.type == kind:
            return str(value.device)
    return kind


def forget() -> None:
    """Drop this process's setups and their kernels (the tests' clean slate)."""
    with _lock:
        _SETUPS.clear()
        _FALLBACKS.clear()
        _GUARDS.clear()

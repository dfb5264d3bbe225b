"""accelctl: hardware accelerators for PyTorch training as pip-installable plugins.

The public API is what :data:`__all__` lists (docs/concepts.md section 4)::

    import accelctl

    accelctl.list_accelerators()              # every installed accelerator, broken ones included
    accelctl.get_accelerator("cuda")          # a handle on one (imports that plugin alone)
    accelctl.resolve("auto", devices="auto")  # what a Trainer runs on
    accelctl.read_stats()                     # device figures of the available accelerators

Plugin authors use :data:`hookimpl`, :class:`Accelerator`, :class:`AcceleratorInfo`, the shared
device parsers and :func:`split_device`; the hooks are documented in :mod:`accelctl.hookspecs`,
the conformance suite and the tests' registry are :mod:`accelctl.testing` (its pytest class
needs pytest: ``accelctl[testing]``). The other public
modules are :mod:`accelctl.integrations.lightning`, :mod:`accelctl.integrations.accelerate`,
:mod:`accelctl.cli`, :mod:`accelctl.launcher`, :mod:`accelctl.torch_build` and
:mod:`accelctl.stats_keys` (the vocabulary of ``device_stats``); modules whose
names start with ``_`` are private.
"""

from __future__ import annotations

import importlib
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

from ._contract.accelerator import Accelerator
from ._contract.errors import (
    AccelctlError,
    AcceleratorUnavailableError,
    CPUFallbackWarning,
    DataLoaderError,
    DeviceSpecError,
    FrameworkVersionError,
    LaunchError,
    PluginConflictError,
    PluginHookError,
    PluginLoadError,
    PluginWarning,
    PrecisionError,
    ProcessSetupError,
    TrainerError,
    UnknownAcceleratorError,
)
from ._contract.info import AcceleratorInfo
from ._contract.markers import hookimpl, hookspec
from ._contract.peak import DevicePeak
from ._host.handle import AcceleratorHandle
from ._host.registry import get_accelerator, list_accelerators
from ._host.status import AcceleratorStatus
from ._kernels import KernelGaps, MissingKernelError

if TYPE_CHECKING:
    from ._base.device_string import split_device
    from ._choice.selection import Selection, resolve
    from ._contract.device_specs import (
        parse_indexed_devices,
        parse_process_count,
        parse_single_device,
    )
    from ._readings.stats import DeviceStats, read_stats, watch_stats
    from ._training.trainer import Trainer
    from .launcher import LaunchFailedError, launch

#: Public names loaded on first access, never by `import accelctl`: those whose modules import
#: torch, and those `accelctl list` does not use (its start-up imports only what it runs).
_LAZY = {
    "Trainer": "accelctl._training.trainer",
    "launch": "accelctl.launcher",
    "LaunchFailedError": "accelctl.launcher",
    "Selection": "accelctl._choice.selection",
    "resolve": "accelctl._choice.selection",
    "split_device": "accelctl._base.device_string",
    "DeviceStats": "accelctl._readings.stats",
    "read_stats": "accelctl._readings.stats",
    "watch_stats": "accelctl._readings.stats",
    "parse_indexed_devices": "accelctl._contract.device_specs",
    "parse_process_count": "accelctl._contract.device_specs",
    "parse_single_device": "accelctl._contract.device_specs",
}


def __getattr__(name: str) -> Any:
    # Read lazily: `import accelctl` stays cheap on the CLI's start-up path.
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next access is a plain attribute read
        return value
    if name == "__version__":
        try:
            return _metadata.version("accelctl")
        except _metadata.PackageNotFoundError:  # a source tree that is not installed
            return "0+unknown"
    raise AttributeError(f"module 'accelctl' has no attribute {name!r}")


__all__ = [
    "AccelctlError",
    "Accelerator",
    "AcceleratorHandle",
    "AcceleratorInfo",
    "AcceleratorStatus",
    "AcceleratorUnavailableError",
    "CPUFallbackWarning",
    "DataLoaderError",
    "DevicePeak",
    "DeviceSpecError",
    "DeviceStats",
    "FrameworkVersionError",
    "KernelGaps",
    "LaunchError",
    "LaunchFailedError",
    "MissingKernelError",
    "PluginConflictError",
    "PluginHookError",
    "PluginLoadError",
    "PluginWarning",
    "PrecisionError",
    "ProcessSetupError",
    "Selection",
    "Trainer",
    "TrainerError",
    "UnknownAcceleratorError",
    "get_accelerator",
    "hookimpl",
    "hookspec",
    "launch",
    "list_accelerators",
    "parse_indexed_devices",
    "parse_process_count",
    "parse_single_device",
    "read_stats",
    "resolve",
    "split_device",
    "watch_stats",
]

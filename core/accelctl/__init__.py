"""accelctl: hardware accelerators for PyTorch training as pip-installable plugins.

Public API (everything else is private)::

    import accelctl

    accelctl.list_accelerators()              # every installed accelerator, broken ones included
    accelctl.get_accelerator("cuda")          # a handle on one (imports that plugin alone)
    accelctl.resolve("auto", devices="auto")  # what a Trainer runs on

Plugin authors use :data:`hookimpl`, :class:`Accelerator`, :class:`AcceleratorInfo`, the shared
device parsers and :func:`split_device`; the hooks are documented in :mod:`accelctl.hookspecs`.
"""

from __future__ import annotations

from typing import Any

from ._project import ENTRY_POINT_GROUP, PROJECT_NAME
from .accelerator import Accelerator
from .device_string import split_device
from .devices import parse_indexed_devices, parse_process_count, parse_single_device
from .errors import (
    AccelctlError,
    AcceleratorTypeError,
    AcceleratorUnavailableError,
    DataLoaderError,
    DeviceSpecError,
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
from .handle import AcceleratorHandle
from .info import AcceleratorInfo
from .markers import hookimpl, hookspec
from .record import PluginRecord
from .registry import (
    AcceleratorRecord,
    Registry,
    get_accelerator,
    get_registry,
    list_accelerators,
    reset_registry,
)
from .selection import Selection, resolve

#: Public names whose modules import torch: loaded on first access, never by `import accelctl`.
_LAZY = {
    "Trainer": "accelctl.trainer",
    "launch": "accelctl.launcher",
    "LaunchFailedError": "accelctl.launcher",
}


def __getattr__(name: str) -> Any:
    # Read lazily: `import accelctl` stays cheap on the CLI's start-up path.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(PROJECT_NAME)
        except PackageNotFoundError:  # a source tree that is not installed
            return "0+unknown"
    raise AttributeError(f"module 'accelctl' has no attribute {name!r}")


__all__ = [
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "AccelctlError",
    "Accelerator",
    "AcceleratorHandle",
    "AcceleratorInfo",
    "AcceleratorRecord",
    "AcceleratorTypeError",
    "AcceleratorUnavailableError",
    "DataLoaderError",
    "DeviceSpecError",
    "LaunchError",
    "LaunchFailedError",
    "PluginConflictError",
    "PluginHookError",
    "PluginLoadError",
    "PluginRecord",
    "PluginWarning",
    "PrecisionError",
    "ProcessSetupError",
    "Registry",
    "Selection",
    "Trainer",
    "TrainerError",
    "UnknownAcceleratorError",
    "__version__",
    "get_accelerator",
    "get_registry",
    "hookimpl",
    "hookspec",
    "launch",
    "list_accelerators",
    "parse_indexed_devices",
    "parse_process_count",
    "parse_single_device",
    "reset_registry",
    "resolve",
    "split_device",
]

"""Which out-of-tree backend torch has loaded as its PrivateUse1 device, and whether to offer it.

torch reserves one dispatch slot, PrivateUse1, for a device it does not ship; a backend package
(torch_openreg, torch_npu, ...) renames the slot (``torch.utils.rename_privateuse1_backend``) and
registers a module under that name (``torch.openreg``). The steps go from cheap to dear and stop
at the first "no":

1. torch already imported: ask it (free).
2. no distribution declares the ``torch.backends`` entry-point group: nothing can be loaded; no
   torch import (the common case, so ``accelctl list`` stays torch-free).
3. ``TORCH_DEVICE_BACKEND_AUTOLOAD`` is not ``1``: ``import torch`` would not load the backend;
   no torch import, and the reason says what to do.
4. ``import torch`` (which loads the backends) and read the slot's name.

A named backend is then offered unless a dedicated plugin (another accelctl plugin whose
entry-point name is the backend's name) is installed: that one always wins.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, NamedTuple

from accelctl import Accelerator
from accelctl.torch_build import import_torch, loaded_torch

from .packages import Installed, scan

AUTOLOAD_VARIABLE = "TORCH_DEVICE_BACKEND_AUTOLOAD"
#: What torch calls the slot while no backend has renamed it.
UNNAMED = ("privateuseone", "privateuse1")
_ALIAS_RE = re.compile(r"^[a-z0-9_-]+$")
_RESERVED = frozenset({"auto", "gpu", "privateuse1"})


class Backend(NamedTuple):
    """What the plugin found: the backend's name and devices, or why there is none to offer."""

    #: torch's device type of the backend (``"openreg"``); None when no backend is loaded.
    name: str | None = None
    #: The package the backend came from (``"torch_openreg 0.0.1"``), where known.
    package: str | None = None
    device_count: int = 0
    #: The ``torch.distributed`` backend torch has registered for the device type, if any.
    distributed_backend: str | None = None
    #: Distribution of a dedicated accelctl plugin for ``name``, which wins over this one.
    dedicated: str | None = None
    reason: str | None = None

    @property
    def available(self) -> bool:
        """True when the backend is loaded, has devices and no dedicated plugin claims it."""
        return self.reason is None and self.device_count > 0

    @property
    def alias(self) -> str | None:
        """Return the name to claim as an alias, or None.

        The backend's, unless a dedicated plugin has it (so the dedicated plugin's canonical name
        wins) or it is not a valid accelctl name."""
        if self.name is None or self.dedicated is not None:
            return None
        if not _ALIAS_RE.match(self.name) or self.name in _RESERVED:
            return None
        return self.name


def _autoload_enabled(environ: Mapping[str, str]) -> bool:
    # torch's own test (torch._is_device_backend_autoload_enabled): anything but "1" is off.
    return environ.get(AUTOLOAD_VARIABLE, "1") == "1"


def _no_backend_reason(installed: Installed, environ: Mapping[str, str]) -> str:
    if not installed.backends:
        return (
            "no out-of-tree torch backend is installed (no package declares the "
            "torch.backends entry-point group)"
        )
    if not _autoload_enabled(environ):
        value = environ.get(AUTOLOAD_VARIABLE)
        return (
            f"{AUTOLOAD_VARIABLE}={value} keeps torch from loading {installed.backends_text()}; "
            f"unset it, or import the backend's package ({installed.backends[0].module}) "
            "before accelctl looks"
        )
    return (
        f"{installed.backends_text()} loaded with torch but registered no PrivateUse1 device "
        "(torch's slot is still unnamed)"
    )


def _slot_name(torch: ModuleType) -> str | None:
    """The name the PrivateUse1 slot has now; None while no backend has renamed it."""
    read = getattr(torch._C, "_get_privateuse1_backend_name", None)
    if read is None:  # torch older than 2.1: no out-of-tree backends to speak of
        return None
    name = str(read())
    return None if name in UNNAMED else name


def _device_module(torch: ModuleType, name: str) -> Any:
    return getattr(torch, name, None)


def _device_count(torch: ModuleType, name: str) -> int:
    """Count the backend's devices.

    ``torch.<name>.device_count()``, the module the backend registered; else
    ``torch.accelerator.device_count()`` where the current accelerator is this backend."""
    module = _device_module(torch, name)
    if module is not None and callable(getattr(module, "device_count", None)):
        return int(module.device_count())
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        current = accelerator.current_accelerator()
        if current is not None and current.type == name:
            return int(accelerator.device_count())
    return 0


def _distributed_backend(name: str) -> str | None:
    """Return the distributed backend torch maps the device type to, or None.

    The backend torch maps the device type to (``Backend.register_backend(...,
    devices=[name])`` adds it), or None: the accelerator then runs in one process."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available():
        return None
    mapping = getattr(dist.Backend, "default_device_backend_map", {})
    found = mapping.get(name)
    return str(found) if found else None


def _package(installed: Installed, torch: ModuleType, name: str) -> str | None:
    """Return the torch.backends package whose module provides ``torch.<name>``.

    The only one, when the module does not tell."""
    module = _device_module(torch, name)
    top = str(getattr(module, "__name__", "")).partition(".")[0]
    for package in installed.backends:
        if package.module == top:
            return package.describe()
    if len(installed.backends) == 1:
        return installed.backends[0].describe()
    return f"module {top}" if top and top != "torch" else None


def probe(path: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Backend:
    """Look for the backend (see the module's docstring for the steps).

    :param path: where to read package metadata (default: ``sys.path``).
    :param environ: where ``TORCH_DEVICE_BACKEND_AUTOLOAD`` is read (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    installed = scan(path)
    torch = loaded_torch()  # never a torch another thread is still importing
    if torch is None:
        if not installed.backends or not _autoload_enabled(environ):
            return Backend(reason=_no_backend_reason(installed, environ))
        if importlib.util.find_spec("torch") is None:
            return Backend(reason=Accelerator.TORCH_MISSING)
        try:
            torch = import_torch()  # loads the backends as torch's own import would
        except Exception as exc:  # a backend that fails to load breaks `import torch` itself
            message = " ".join(str(exc).split())
            return Backend(reason=f"import torch failed: {type(exc).__name__}: {message}")
    name = _slot_name(torch)
    if name is None:
        return Backend(reason=_no_backend_reason(installed, environ))
    package = _package(installed, torch, name)
    owners = installed.plugin_distributions(name)
    if owners:
        return Backend(
            name=name,
            package=package,
            dedicated=owners[0],
            reason=f"the dedicated plugin {' and '.join(owners)} provides {name!r}",
        )
    try:
        count = _device_count(torch, name)
    except Exception as exc:  # the backend's own error: say it, never raise from detect
        return Backend(
            name=name, package=package, reason=f"{name}: reading the device count failed: {exc}"
        )
    backend = _distributed_backend(name)
    if count <= 0:
        return Backend(
            name=name,
            package=package,
            distributed_backend=backend,
            reason=f"the PrivateUse1 backend {name!r} reports no device",
        )
    return Backend(name=name, package=package, device_count=count, distributed_backend=backend)

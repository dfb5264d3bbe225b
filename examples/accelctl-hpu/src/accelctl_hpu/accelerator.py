"""The HPU accelerator as a class-based accelctl plugin: its methods are its hooks."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from types import ModuleType
from typing import TYPE_CHECKING

import accelctl

if TYPE_CHECKING:
    import torch

#: Habana's package; its ``torch.hpu`` module is the PyTorch bridge.
HABANA_PACKAGE = "habana_frameworks"
HABANA_TORCH_MODULE = "habana_frameworks.torch.hpu"
#: Habana's visible-device variable (the analogue of ``CUDA_VISIBLE_DEVICES``): a comma list of
#: module ids, honoured by Habana's runtime and by this plugin's device count.
VISIBLE_MODULES_VAR = "HABANA_VISIBLE_MODULES"

#: ``memory_stats`` keys of Habana's bridge -> accelctl's stats vocabulary (bytes and counts).
_MEMORY_KEYS = {
    "InUse": "memory_allocated_bytes",
    "Limit": "memory_total_bytes",
    "MaxInUse": "hpu.max_memory_allocated_bytes",
    "MaxAllocSize": "hpu.max_alloc_size_bytes",
    "NumAllocs": "hpu.num_allocs",
    "NumFrees": "hpu.num_frees",
    "ActiveAllocs": "hpu.active_allocs",
    "TotalSystemAllocs": "hpu.total_system_allocs",
    "TotalSystemFrees": "hpu.total_system_frees",
    "TotalActiveAllocs": "hpu.total_active_allocs",
}


def visible_modules(environ: dict[str, str] | None = None) -> list[int] | None:
    """The module ids listed in ``HABANA_VISIBLE_MODULES``; None when it is unset.

    :raises ValueError: when the variable is set but is not a comma list of ids.
    """
    value = (os.environ if environ is None else environ).get(VISIBLE_MODULES_VAR)
    if value is None:
        return None
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if not all(part.isdigit() for part in parts):
        raise ValueError(
            f"{VISIBLE_MODULES_VAR}={value!r} is not a comma-separated list of module ids "
            f'(for example "0,1")'
        )
    return [int(part) for part in parts]


@functools.cache
def _bridge() -> ModuleType | Exception | None:
    """Return Habana's PyTorch bridge module, None, or the exception its import raised.

    None when Habana's software is not installed, the exception when importing it failed. Imported
    once: it loads torch and Habana's runtime."""
    if importlib.util.find_spec(HABANA_PACKAGE) is None:
        return None
    try:
        return importlib.import_module(HABANA_TORCH_MODULE)
    except Exception as exc:  # a broken install must read as "unavailable", never raise
        return exc


class HPUAccelerator(accelctl.Accelerator):
    """Intel Gaudi (Habana) HPUs through Habana's PyTorch bridge (``habana_frameworks``).

    Detected when Habana's software is installed and its bridge reports a device; several
    processes talk through ``hccl``. Device specs and devices (``torch.device("hpu", i)``) are the
    base class's defaults for an indexed accelerator.
    """

    name = "hpu"  # also the torch.device type: torch knows "hpu" natively
    description = "Intel Gaudi (Habana) HPU"
    priority = 200  # a specialised accelerator wins "auto" over CUDA (100) and the CPU (0)
    distributed_backend = "hccl"
    aliases = ("gaudi",)

    def detect(self) -> bool:
        """True when Habana's bridge imports and reports an HPU; never raises.

        Says no before importing anything when ``habana_frameworks`` is not installed or
        ``HABANA_VISIBLE_MODULES`` hides every module.
        """
        if importlib.util.find_spec(HABANA_PACKAGE) is None:
            return False
        try:
            modules = visible_modules()
        except ValueError:
            return False
        if modules == []:
            return False
        bridge = _bridge()
        if not isinstance(bridge, ModuleType):
            return False
        try:
            return bool(bridge.is_available())
        except Exception:
            return False

    def unavailable_reason(self) -> str | None:
        """Why :meth:`detect` is False, in one line."""
        if importlib.util.find_spec(HABANA_PACKAGE) is None:
            return (
                "habana_frameworks is not installed (Intel Gaudi software: https://docs.habana.ai)"
            )
        try:
            modules = visible_modules()
        except ValueError as exc:
            return str(exc)
        if modules == []:
            return f"{VISIBLE_MODULES_VAR} is set but lists no module"
        bridge = _bridge()
        if isinstance(bridge, Exception):
            return f"importing {HABANA_TORCH_MODULE} failed: {type(bridge).__name__}: {bridge}"
        return "Habana's PyTorch bridge reports no HPU (is the habanalabs driver loaded?)"

    def auto_device_count(self) -> int:
        """The HPUs the bridge reports, at most as many as ``HABANA_VISIBLE_MODULES`` lists."""
        if not self.detect():
            return 0
        bridge = _bridge()
        assert isinstance(bridge, ModuleType)
        count = int(bridge.device_count())
        modules = visible_modules()
        return count if modules is None else min(count, len(modules))

    def environment_info(self) -> dict[str, str | int | float | bool | None]:
        """For ``accelctl env``: ``HABANA_VISIBLE_MODULES`` when it is set."""
        return dict(self.environment_variables([VISIBLE_MODULES_VAR]))

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Habana's allocator figures (``memory_stats``) where the bridge has them.

        ``device`` is a ``torch.device`` or its string (``"hpu:0"``, as ``accelctl stats``
        passes it); the bridge takes the string as it is. ``{}`` when Habana's runtime is not
        initialised in this process yet: reading stats must not start it.
        """
        kind, _ = accelctl.split_device(device)
        if kind != self.name:
            raise ValueError(f"{self.name}: device_stats takes an hpu device, not {str(device)!r}")
        bridge = _bridge()
        if not isinstance(bridge, ModuleType) or not hasattr(bridge, "memory_stats"):
            return {}
        is_initialized = getattr(bridge, "is_initialized", None)
        if is_initialized is not None and not is_initialized():
            return {}
        raw = bridge.memory_stats(device)
        return {
            key: int(raw[habana_key])
            for habana_key, key in _MEMORY_KEYS.items()
            if isinstance(raw.get(habana_key), (int, float))
        }

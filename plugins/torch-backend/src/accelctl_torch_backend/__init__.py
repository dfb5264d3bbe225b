"""accelctl plugin for the out-of-tree backend torch has loaded as its PrivateUse1 device.

A vendor's torch backend (torch_openreg, torch_npu, ...) fills torch's PrivateUse1 slot under its
own name (``openreg``, ``npu``) and is loaded by ``import torch`` through the ``torch.backends``
entry-point group. This plugin makes such a backend an accelctl accelerator where no dedicated
plugin claims its name: canonical name ``privateuse1``, the backend's name as an alias (so
``resolve("openreg")`` and ``Trainer(accelerator="openreg")`` find it), the indexed device table,
allocator figures through ``torch.accelerator``, and the distributed backend torch has registered
for the device type, or none (one process).

Where no package declares ``torch.backends`` (the common case) ``detect()`` says no without
importing torch; see :mod:`accelctl_torch_backend.probe` for the steps. Priority 50: above the
CPU's 0, below a GPU plugin's 100; a dedicated plugin for the same device always wins.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import accelctl

from .probe import probe

if TYPE_CHECKING:
    import torch

NAME = "privateuse1"
PRIORITY = 50


class PrivateUse1Accelerator(accelctl.Accelerator):
    """The backend in torch's PrivateUse1 slot, read from the probe.

    Its name (``openreg``) is known only once torch has loaded it, so the device type, the alias and
    the description are read from the probe (:mod:`accelctl_torch_backend.probe`) rather than
    written as class attributes."""

    name = NAME
    priority = PRIORITY

    def detect(self) -> bool:
        """Say whether torch has a renamed PrivateUse1 backend with devices that no plugin claims.

        True when torch has a renamed PrivateUse1 backend with devices and no dedicated
        plugin claims it."""
        return probe().available

    def unavailable_reason(self) -> str | None:
        """No backend package, autoloading off, a backend without devices, or a dedicated plugin."""
        return probe().reason

    def auto_device_count(self) -> int:
        """The backend's devices (``torch.<name>.device_count()``); 0 when not detected."""
        found = probe()
        return found.device_count if found.available else 0

    @staticmethod
    def _device_type() -> str:
        """Return the backend's device type, for devices and messages.

        While no backend is loaded, it is the slot's name.
        """
        return probe().name or NAME

    def parse_devices(self, devices: Any) -> list[int]:
        """Parse a devices spec over the backend's devices.

        The shared indexed parser over the backend's devices, its messages naming the device
        type (``openreg: devices=3 ...``): ``"auto"``, ``k``, ``"0,1"``..."""
        return accelctl.parse_indexed_devices(
            devices, visible=self.auto_device_count(), accelerator=self._device_type()
        )

    def get_parallel_devices(self, devices: int | list[int]) -> list[torch.device]:
        """``<name>:i`` for each index (``openreg:0``, ...)."""
        import torch

        device_type = self._device_type()
        indices = range(devices) if isinstance(devices, int) else devices
        return [torch.device(device_type, index) for index in indices]

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Return ``torch.accelerator``'s allocator figures for one device, where already in use.

        The backend is never initialised here. A process that does not use it gets ``{}``
        (``accelctl stats`` in a fresh process: an allocator's figures are per process, so
        there is nothing to read).

        ``device`` is a ``torch.device`` or its string (``"openreg:0"``).
        """
        found = probe()
        kind, index = accelctl.split_device(device)
        if found.name is None or kind != found.name:
            expected = found.name or "no PrivateUse1 backend is loaded"
            raise ValueError(
                f"{self.accelerator_name}: device_stats takes a {expected} device, "
                f"not {str(device)!r}"
            )
        # A backend whose module cannot tell counts as not in use: reading its allocator might
        # start its runtime, which device_stats must never do.
        if not self.torch_device_in_use(found.name):
            return {}
        import torch

        accelerator = _accelerator_api(torch, found.name)
        if accelerator is None:  # torch.accelerator serves another device here
            return {}
        if index is None:
            index = int(accelerator.current_device_index())
        figures: dict[str, int | float] = {}
        readers = {
            "memory_allocated_bytes": "memory_allocated",
            "memory_reserved_bytes": "memory_reserved",
            "memory_peak_allocated_bytes": "max_memory_allocated",
        }
        for key, function in readers.items():
            read = getattr(accelerator, function, None)
            if read is not None:
                try:
                    figures[key] = int(read(index))
                except (RuntimeError, NotImplementedError):  # the backend's allocator lacks it
                    continue
        figures.update(_allocator_counters(accelerator, index, found.name))
        try:
            free, total = accelerator.get_memory_info(index)
        except (AttributeError, RuntimeError, NotImplementedError):  # openreg: not implemented
            pass
        else:
            figures["memory_used_bytes"] = int(total - free)
            figures["memory_total_bytes"] = int(total)
        return figures

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current.

        The backend module's ``set_device``, else ``torch.accelerator.set_device_index``."""
        import torch

        found = probe()
        index = accelctl.split_device(device)[1] or 0
        set_device = getattr(getattr(torch, found.name or "", None), "set_device", None)
        if callable(set_device):
            set_device(index)
            return
        accelerator = _accelerator_api(torch, found.name or "")
        if accelerator is not None:
            accelerator.set_device_index(index)

    def teardown(self) -> None:
        """Return the allocator's cached memory (only where the backend is in use)."""
        found = probe()
        if found.name is not None and self.torch_device_in_use(found.name):
            import torch

            accelerator = _accelerator_api(torch, found.name)
            if accelerator is not None and hasattr(accelerator, "empty_cache"):
                accelerator.empty_cache()

    def kernel_gaps(self) -> accelctl.KernelGaps | None:
        """Return what the loaded backend is known to lack, or None.

        Looked up in :data:`KNOWN_GAPS` by the backend's name; None for a backend not in the
        table: its missing kernels show as torch's errors.
        """
        return KNOWN_GAPS.get(probe().name or "")

    def accelerator_info(self) -> accelctl.AcceleratorInfo:
        """Return the plugin's info: priority, alias, device type and distributed backend.

        Priority 50, the backend's name as alias and device type, the distributed backend
        torch registered for it (or none: one process)."""
        found = probe()
        if found.name is None:
            description = "out-of-tree torch backend (PrivateUse1): none loaded"
        else:
            origin = f" ({found.package})" if found.package else ""
            description = f"PrivateUse1 backend {found.name!r}{origin}"
        return replace(
            super().accelerator_info(),
            description=description,
            distributed_backend=found.distributed_backend,
            aliases=(found.alias,) if found.alias else (),
            device_type=found.name if found.alias else None,
        )


#: Backend name -> its gaps that torch's errors do not show: kernels registered as placeholders.
#: PyTorch's own test backend routes attention to the fused "overrideable" operators (its
#: ``_fused_sdp_choice``), whose kernels return uninitialised memory (forward) and undefined
#: gradients (backward): without this, a model using ``scaled_dot_product_attention`` trains on
#: garbage until its backward fails with "tensor does not have a device". Its ``abs`` runs float32
#: only ("Abs kernel only supports float type"), which a bf16 run meets through ``isfinite``
#: (DeepSpeed's overflow check): ``partial``.
KNOWN_GAPS: dict[str, accelctl.KernelGaps] = {
    "openreg": accelctl.KernelGaps(
        missing=(
            "aten::_scaled_dot_product_fused_attention_overrideable",
            "aten::_scaled_dot_product_fused_attention_overrideable_backward",
        ),
        partial=("aten::abs",),
        note="torch_openreg's fused attention kernels are placeholders",
    ),
}

#: ``torch.accelerator.memory_stats`` keys worth a figure of their own (the byte counts are the
#: common keys already): how often the allocator had to free its cache and retry, and ran out.
_COUNTERS = ("num_alloc_retries", "num_ooms")


def _allocator_counters(accelerator: Any, index: int, name: str) -> dict[str, int | float]:
    """Return the allocator's counters from ``memory_stats(index)``.

    Such as ``openreg.num_ooms``, where the backend's allocator keeps them; ``{}`` where it
    has no ``memory_stats``.
    """
    read = getattr(accelerator, "memory_stats", None)
    if read is None:
        return {}
    try:
        stats = read(index)
    except (RuntimeError, NotImplementedError):  # the backend's allocator lacks it
        return {}
    return {f"{name}.{key}": int(stats[key]) for key in _COUNTERS if key in stats}


def _accelerator_api(torch: Any, name: str) -> Any:
    """Return ``torch.accelerator`` where it serves this backend, else None.

    torch makes a registered PrivateUse1 backend the current accelerator.
    """
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    current = accelerator.current_accelerator()
    return accelerator if current is not None and current.type == name else None


__all__ = ["KNOWN_GAPS", "PRIORITY", "PrivateUse1Accelerator"]

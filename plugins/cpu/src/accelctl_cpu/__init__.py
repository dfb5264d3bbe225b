"""accelctl plugin for the CPU.

Always detected, one process by default, any number of processes through ``gloo``. Module-level
imports stay light (no torch, no psutil): the hooks import what they need.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import accelctl

if TYPE_CHECKING:
    import torch


class CPUAccelerator(accelctl.Accelerator):
    """The CPU: a process count instead of device indices, machine-wide figures as its stats.

    Priority 0, the floor of ``"auto"``; ``gloo`` for several processes.

    :param peak: what one process's share of the CPU can do at most, declared by the user (a
        CPU's peak depends on its cores, vector units and clocks, which accelctl cannot read
        honestly): an :class:`accelctl.DevicePeak`, a dict of its fields, or FLOPs per second for
        every data type. None (the entry point's instance): unknown, so no ``mfu``, unless
        ``ACCELCTL_PEAK_FLOPS`` declares it. ``Trainer(accelerator=CPUAccelerator(peak=2e12))``.
    """

    name = "cpu"
    description = "CPU (torch's native backend)"
    distributed_backend = "gloo"

    def __init__(self, peak: accelctl.DevicePeak | Mapping[str, Any] | float | None = None) -> None:
        if isinstance(peak, (int, float)) and not isinstance(peak, bool):
            peak = accelctl.DevicePeak.uniform(peak, source="declared: CPUAccelerator(peak=...)")
        elif isinstance(peak, Mapping):
            peak = accelctl.DevicePeak(**{"source": "declared: CPUAccelerator(peak=...)", **peak})
        elif peak is not None and not isinstance(peak, accelctl.DevicePeak):
            raise TypeError(
                f"CPUAccelerator(peak={peak!r}): give an accelctl.DevicePeak, a dict of its "
                f"fields, FLOPs per second as a number, or None (unknown)"
            )
        self._peak = peak

    def detect(self) -> bool:
        """The CPU is always there."""
        return True

    def auto_device_count(self) -> int:
        """``devices="auto"`` on the CPU is one process."""
        return 1

    def parse_devices(self, devices: Any) -> int:
        """A process count: ``"auto"`` is 1, ``k`` / ``"k"`` is k; indices are refused."""
        return accelctl.parse_process_count(devices, accelerator=self.accelerator_name)

    def get_parallel_devices(self, devices: int) -> list[torch.device]:
        """``devices`` processes, each on ``torch.device("cpu")``."""
        import torch

        return [torch.device("cpu")] * devices

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Return machine-wide CPU, memory and swap figures.

        They come from psutil, which never sleeps here; ``cpu`` is a ``torch.device`` or the
        string ``"cpu"`` (no torch import). ``utilization_percent`` and
        ``cpu_percent`` are one reading (the vocabulary's key, and the first contract's). No
        allocator, power or temperature figures: psutil has none a user could trust for the
        CPU torch runs on."""
        self._check_device(device)
        import psutil

        memory = psutil.virtual_memory()
        busy = _cpu_percent(psutil.cpu_times())
        return {
            "utilization_percent": busy,
            "cpu_percent": busy,
            "memory_used_bytes": int(memory.total - memory.available),
            "memory_total_bytes": int(memory.total),
            "swap_percent": float(psutil.swap_memory().percent),
        }

    def device_peak(self, device: torch.device | str) -> accelctl.DevicePeak | None:
        """The peak declared with ``CPUAccelerator(peak=...)``; None (unknown) otherwise."""
        self._check_device(device)
        return self._peak

    def _check_device(self, device: torch.device | str) -> None:
        if accelctl.split_device(device)[0] != "cpu":
            raise ValueError(
                f"{self.accelerator_name}: device_stats and device_peak take a cpu device, "
                f"not {str(device)!r}"
            )


# The previous reading is the process's, not an instance's: the registry, the Trainer and a test
# may each hold a CPUAccelerator, and "since the previous reading" means any of them.
_previous_times: Any = None
_previous_lock = threading.Lock()


def _cpu_percent(now: Any) -> float:
    """Machine-wide CPU use since the previous reading of this process, from ``cpu_times()``.

    Not ``psutil.cpu_percent(interval=None)``: it keeps its previous sample per *thread*, and the
    core calls hooks from several threads (its worker threads, where it asks every plugin at
    once, and the caller's), so a reading in a new thread would be a first one, 0.0. The first
    reading of a process has nothing to compare with and
    says 0.0 too; ``accelctl stats`` takes one to throw away first.
    """
    global _previous_times
    with _previous_lock:
        before, _previous_times = _previous_times, now
    if before is None:
        return 0.0
    busy, total = _busy_and_total(now)
    busy_before, total_before = _busy_and_total(before)
    if total <= total_before:
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * (busy - busy_before) / (total - total_before))), 1)


def _busy_and_total(times: Any) -> tuple[float, float]:
    # Linux counts guest time inside user and nice already; idle and iowait are not busy.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - times.idle - getattr(times, "iowait", 0.0), total


__all__ = ["CPUAccelerator"]

"""accelctl plugin for the CPU.

Always detected, one process by default, any number of processes through ``gloo``. Module-level
imports stay light (no torch, no psutil): the hooks import what they need.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import accelctl

if TYPE_CHECKING:
    import torch


class CPUAccelerator(accelctl.Accelerator):
    """The CPU: a process count instead of device indices, machine-wide figures as its stats.

    Priority 0, the floor of ``"auto"``; ``gloo`` for several processes.
    """

    name = "cpu"
    description = "CPU (torch's native backend)"
    distributed_backend = "gloo"

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
        """Machine-wide CPU, memory and swap figures (psutil; never sleeps) for ``cpu`` (a
        ``torch.device`` or the string ``"cpu"``: no torch import)."""
        if accelctl.split_device(device)[0] != "cpu":
            raise ValueError(
                f"{self.accelerator_name}: device_stats takes a cpu device, not {str(device)!r}"
            )
        import psutil

        memory = psutil.virtual_memory()
        return {
            "cpu_percent": _cpu_percent(psutil.cpu_times()),
            "memory_used_bytes": int(memory.total - memory.available),
            "memory_total_bytes": int(memory.total),
            "swap_percent": float(psutil.swap_memory().percent),
        }


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

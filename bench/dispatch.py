"""Section 3, hook dispatch: microseconds per hook call through a handle, bare pluggy, and directly.

Through an :class:`accelctl.AcceleratorHandle` (the plugin's function called directly, plus
accelctl's return-type check), through a bare pluggy hook caller holding the same plugin, and
calling the plugin's function directly.

Target: a call through the handle costs at most 3x the bare pluggy call.

Two plugins: a null accelerator whose hooks do nothing (the cost of dispatch itself), and the
real CPU plugin (how much of a real hook's cost dispatch is).
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from typing import Any

import pluggy

import accelctl
import accelctl.hookspecs
import accelctl.testing

from .targets import Target


def _null_plugin() -> accelctl.Accelerator:
    import torch

    cpu_devices = [torch.device("cpu")]
    info = accelctl.AcceleratorInfo(description="does nothing", distributed_backend="gloo")

    class NullAccelerator(accelctl.Accelerator):
        """Every hook returns a ready value: what is left is the cost of calling it."""

        name = "null"

        def detect(self) -> bool:
            return True

        def auto_device_count(self) -> int:
            return 1

        def parse_devices(self, devices: Any) -> int:
            return 1

        def get_parallel_devices(self, devices: Any) -> list[torch.device]:
            return cpu_devices

        def device_stats(self, device: torch.device) -> dict[str, int | float]:
            return {}

        def unavailable_reason(self) -> str | None:
            return None

        def accelerator_info(self) -> accelctl.AcceleratorInfo:
            return info

        def setup_device(self, device: torch.device) -> None:
            return None

        def teardown(self) -> None:
            return None

        def environment_info(self) -> dict[str, str | int | float | bool | None]:
            return {}

        def device_peak(self, device: torch.device) -> None:
            return None

        def kernel_gaps(self) -> None:
            return None

    return NullAccelerator()


def _per_call_us(function: Callable[[], object], repeats: int, quick: bool) -> float:
    timer = timeit.Timer(function)
    if quick:
        number = 200
    else:
        number, _ = timer.autorange()  # enough calls for 0.2 s
    # Each sample is ~0.2 s of calls: 3 to 5 of them give a steady median.
    samples = timer.repeat(repeat=min(max(repeats, 3), 5), number=number)
    return statistics.median(samples) / number * 1e6


def _hook_calls(
    handle: accelctl.AcceleratorHandle, device: Any
) -> dict[str, tuple[dict[str, Any], Callable[[], object]]]:
    """hook -> (its keyword arguments, the handle's call)."""
    return {
        "detect": ({}, handle.detect),
        "auto_device_count": ({}, handle.auto_device_count),
        "parse_devices": ({"devices": 1}, lambda: handle.parse_devices(1)),
        "get_parallel_devices": ({"devices": 1}, lambda: handle.get_parallel_devices(1)),
        "device_stats": ({"device": device}, lambda: handle.device_stats(device)),
        "unavailable_reason": ({}, handle.unavailable_reason),
        "accelerator_info": ({}, handle.accelerator_info),
        "setup_device": ({"device": device}, lambda: handle.setup_device(device)),
        "teardown": ({}, handle.teardown),
        "environment_info": ({}, handle.environment_info),
        "device_peak": ({"device": device}, lambda: handle.device_peak(device)),
        "kernel_gaps": ({}, handle.kernel_gaps),
    }


class _BareManager(pluggy.PluginManager):
    """The baseline: pluggy's manager with accelctl's hook specs, hook-named methods as hooks.

    The methods of an :class:`accelctl.Accelerator` named after hooks, unmarked, as accelctl takes
    them.
    """

    def __init__(self) -> None:
        super().__init__("accelctl")
        self.add_hookspecs(accelctl.hookspecs)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and isinstance(plugin, accelctl.Accelerator):
            if name in accelctl.hookspecs.ALL_HOOKS and callable(getattr(plugin, name, None)):
                return {}
        return opts


def _measure_plugin(
    plugin_label: str, handle: accelctl.AcceleratorHandle, repeats: int, quick: bool
) -> list[dict[str, Any]]:
    import torch

    device = torch.device("cpu")
    manager = _BareManager()
    manager.register(handle.plugin)  # a bare pluggy manager holding this one plugin
    hook_caller = manager.hook
    rows = []
    for hook, (kwargs, through_handle) in _hook_calls(handle, device).items():
        if not handle.implements(hook):
            continue
        direct_fn = getattr(handle.plugin, hook)
        pluggy_fn = getattr(hook_caller, hook)
        args = tuple(kwargs.values())
        direct = _per_call_us(lambda f=direct_fn, a=args: f(*a), repeats, quick)  # type: ignore[misc]
        pluggy = _per_call_us(lambda f=pluggy_fn, k=kwargs: f(**k), repeats, quick)  # type: ignore[misc]
        handle_us = _per_call_us(through_handle, repeats, quick)
        rows.append(
            {
                "plugin": plugin_label,
                "hook": hook,
                "direct_us": round(direct, 3),
                "pluggy_us": round(pluggy, 3),
                "handle_us": round(handle_us, 3),
                "overhead_us": round(handle_us - direct, 3),
            }
        )
    return rows


def run(repeats: int, quick: bool) -> dict[str, Any]:
    """Per-call microseconds of every hook of the null plugin and of the CPU plugin."""
    rows = _measure_plugin(
        "null (does nothing)",
        accelctl.AcceleratorHandle.from_object(_null_plugin()),
        repeats,
        quick,
    )
    worst = max(row["handle_us"] / row["pluggy_us"] for row in rows)
    targets = [
        Target("a hook call through the handle / a bare pluggy call <= 3", round(worst, 3), 3)
    ]
    try:
        cpu = accelctl.testing.Registry().get("cpu")
    except accelctl.AccelctlError as exc:  # the CPU plugin is not installed here
        return {"rows": rows, "cpu_plugin": f"skipped: {exc}", "targets": _to_dicts(targets)}
    rows += _measure_plugin(f"cpu ({cpu.distribution} {cpu.version})", cpu, repeats, quick)
    return {
        "rows": rows,
        "cpu_plugin": "measured",
        "concurrent": _concurrent_calls(seconds=0.2 if quick else 5.0),
        "targets": _to_dicts(targets),
    }


def _to_dicts(targets: list[Target]) -> list[dict[str, Any]]:
    return [target.to_dict() for target in targets]


def _concurrent_calls(seconds: float, threads: int = 8) -> dict[str, Any]:
    """Count the calls ``threads`` threads complete in ``seconds``, and the same load in one thread.

    Each thread calls in turn ``accelctl.resolve("cpu", 1)``, ``accelctl.get_accelerator("cpu")``
    and the handle's ``device_stats("cpu")``: a load where a thread started per hook call would
    show. The one-thread run is for the ratio.
    """
    import threading
    import time

    def hammer(counts: list[int], until: float) -> None:
        done = 0
        while time.perf_counter() < until:
            accelctl.resolve("cpu", 1)
            accelctl.get_accelerator("cpu").device_stats("cpu")
            done += 3
        counts.append(done)

    def run(n: int) -> int:
        counts: list[int] = []
        until = time.perf_counter() + seconds
        workers = [threading.Thread(target=hammer, args=(counts, until)) for _ in range(n)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return sum(counts)

    many, one = run(threads), run(1)
    return {
        "threads": threads,
        "seconds": seconds,
        "calls": many,
        "calls_per_s": round(many / seconds),
        "one_thread_calls_per_s": round(one / seconds),
    }

"""Section 3, hook dispatch: microseconds per call of each hook through an
:class:`accelctl.AcceleratorHandle` (the plugin's function called directly, plus accelctl's
return-type check), through a bare pluggy hook caller holding the same plugin, and calling the
plugin's function directly.

Target (issue 17): a call through the handle costs at most 3x the bare pluggy call.

Two plugins: a null accelerator whose nine hooks do nothing (the cost of dispatch itself), and the
real CPU plugin (how much of a real hook's cost dispatch is).
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from typing import Any

import accelctl
import accelctl.testing


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
    }


def _measure_plugin(
    plugin_label: str, handle: accelctl.AcceleratorHandle, repeats: int, quick: bool
) -> list[dict[str, Any]]:
    import torch

    from accelctl._loading import _Specs  # the manager accelctl validates plugins with

    device = torch.device("cpu")
    manager = _Specs()
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
    try:
        cpu = accelctl.testing.Registry().get("cpu")
    except accelctl.AccelctlError as exc:  # the CPU plugin is not installed here
        return {"rows": rows, "cpu_plugin": f"skipped: {exc}"}
    rows += _measure_plugin(f"cpu ({cpu.distribution} {cpu.version})", cpu, repeats, quick)
    return {"rows": rows, "cpu_plugin": "measured"}

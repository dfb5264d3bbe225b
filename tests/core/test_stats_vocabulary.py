"""``device_stats``'s vocabulary, a plugin's declared peak, and the allocator's figures as fallback.

The vocabulary is :mod:`accelctl.stats_keys`; the peak :class:`accelctl.DevicePeak` and
``ACCELCTL_PEAK_FLOPS``; the handle reads the allocator's figures from ``torch.accelerator`` where a
plugin gives none.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
import torch

import accelctl
from accelctl._contract import settings as _settings
from accelctl.stats_keys import VOCABULARY, problems, unit_of


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("memory_total_bytes", "bytes"),
        ("cuda.link_bytes_per_second", "per second"),
        ("utilization_percent", "percent"),
        ("cuda.sm_clock_hz", "hertz"),
        ("power_watts", "watts"),
        ("temperature_celsius", "celsius"),
        ("cuda.num_ooms", None),
    ],
)
def test_a_keys_unit_is_its_suffix(key: str, unit: str | None) -> None:
    assert unit_of(key) == unit


def test_every_common_key_has_a_unit_and_a_meaning() -> None:
    assert all(key.unit is not None and key.meaning for key in VOCABULARY.values())
    assert {"memory_peak_allocated_bytes", "utilization_percent"} <= set(VOCABULARY)


def test_a_reading_within_the_rules_has_no_problems() -> None:
    reading = {
        "memory_allocated_bytes": 1,
        "memory_reserved_bytes": 2,
        "memory_peak_allocated_bytes": 3,
        "memory_total_bytes": 4,
        "utilization_percent": 100.0,
        "temperature_celsius": -5.0,  # a cold device: only units that cannot be negative are
        "power_watts": math.nan,  # not readable now: no range to check
        "hpu.num_allocs": 3,
    }
    assert problems(reading, ["hpu."]) == []


def test_peak_allocated_below_allocated_is_a_problem() -> None:
    reading = {"memory_allocated_bytes": 5, "memory_peak_allocated_bytes": 4}
    assert problems(reading, ["x."]) == [
        "memory_allocated_bytes (5) exceeds memory_peak_allocated_bytes (4)"
    ]


def test_the_vocabulary_is_read_without_torch() -> None:
    code = "import accelctl.stats_keys, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- DevicePeak ------------------------------------------------------------------------------


def test_a_peak_is_coerced_from_a_dict_and_none_means_unknown() -> None:
    peak = accelctl.DevicePeak.coerce({"flops": {"bfloat16": 1e15}, "source": "sheet"})
    assert peak == accelctl.DevicePeak({"bfloat16": 1e15}, source="sheet")
    assert peak is not None and peak.flops_for("float32") is None
    assert accelctl.DevicePeak.coerce(None) is None
    with pytest.raises(ValueError, match=r"unknown DevicePeak field.*'tflops'"):
        accelctl.DevicePeak.coerce({"tflops": 1})


@pytest.mark.parametrize(
    ("text", "flops"),
    [
        ("2e12", dict.fromkeys(("float32", "bfloat16", "int8"), 2e12)),
        (" bfloat16=4e12, float32 = 1e12 ", {"bfloat16": 4e12, "float32": 1e12}),
    ],
)
def test_the_declared_peak_variable(text: str, flops: dict[str, float]) -> None:
    peak = _settings.declared_peak({"ACCELCTL_PEAK_FLOPS": text})
    assert peak is not None and peak.source == "declared by ACCELCTL_PEAK_FLOPS"
    assert {dtype: peak.flops[dtype] for dtype in flops} == flops
    assert _settings.declared_peak({"ACCELCTL_PEAK_FLOPS": " "}) is None
    assert _settings.declared_peak({}) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("fast", "could not convert string to float"),
        ("bf16=1e12", "unknown data type 'bf16'; accepted: float64, float32, tf32, bfloat16"),
        ("float32=-1", "must be a finite number > 0"),
        ("float32", "must be a finite number > 0|could not convert"),
        ("float32=1e12,bfloat16", "'bfloat16' has no '='"),
    ],
)
def test_a_declared_peak_that_means_nothing_names_the_variable(text: str, why: str) -> None:
    with pytest.raises(_settings.SettingError) as raised:
        _settings.declared_peak({"ACCELCTL_PEAK_FLOPS": text})
    message = str(raised.value)
    assert message.startswith(f"ACCELCTL_PEAK_FLOPS={text!r} is not accepted (")
    assert "give a number of FLOPs per second for every data type ('1.5e12')" in message
    assert any(part in message for part in why.split("|")), message


# -- torch.accelerator's figures where the plugin gives none -----------------------------------


class AllocatorLess(accelctl.Accelerator):
    """A ``cuda``-typed accelerator whose stats have one figure of its own, at most."""

    name = "bare"
    device_type = "cuda"

    def __init__(self, reading: dict[str, int | float]) -> None:
        self.reading = reading

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2

    def device_stats(self, device: Any) -> dict[str, int | float]:
        return dict(self.reading)


@pytest.fixture
def cuda_in_use(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """torch as if this process used CUDA through ``torch.accelerator``: the calls it gets."""
    calls: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda")
    )
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 1)

    def reader(figure: int) -> Any:
        return lambda index: calls.append(index) or figure

    monkeypatch.setattr(torch.accelerator, "memory_allocated", reader(100))
    monkeypatch.setattr(torch.accelerator, "memory_reserved", reader(200))
    monkeypatch.setattr(torch.accelerator, "max_memory_allocated", reader(150))
    monkeypatch.setattr(torch.accelerator, "get_memory_info", lambda index: (700, 1000))
    return calls


def test_the_allocators_figures_fill_what_the_plugin_leaves_out(cuda_in_use: list[object]) -> None:
    handle = accelctl.AcceleratorHandle.from_object(AllocatorLess({"memory_reserved_bytes": 7}))
    assert handle.device_stats("cuda:0") == {
        "memory_reserved_bytes": 7,  # the plugin's own figure wins
        "memory_allocated_bytes": 100,
        "memory_peak_allocated_bytes": 150,
        "memory_total_bytes": 1000,
        "memory_used_bytes": 300,
    }
    assert cuda_in_use == [0, 0]  # cuda:0, for allocated and peak: reserved was given
    handle.device_stats(torch.device("cuda"))  # no index: the current device
    assert cuda_in_use[-1] == 1


def test_nothing_is_read_where_the_device_is_not_in_use(
    cuda_in_use: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = accelctl.AcceleratorHandle.from_object(AllocatorLess({}))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert handle.device_stats("cuda:0") == {}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert handle.device_stats("cpu") == {}  # not the type torch.accelerator serves
    assert cuda_in_use == []


def test_a_function_the_backend_lacks_is_skipped_figure_by_figure(
    cuda_in_use: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_implemented(index: int) -> Any:
        raise RuntimeError("memory info is not implemented for this backend")

    monkeypatch.setattr(torch.accelerator, "get_memory_info", not_implemented)
    handle = accelctl.AcceleratorHandle.from_object(AllocatorLess({"bare.queue": 1}))
    assert handle.device_stats("cuda:1") == {
        "bare.queue": 1,
        "memory_allocated_bytes": 100,
        "memory_reserved_bytes": 200,
        "memory_peak_allocated_bytes": 150,
    }

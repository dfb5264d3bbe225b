"""Lightning's ``DeviceStatsMonitor`` shows a plugin's readings through the bridge.

In the vocabulary of ``accelctl.stats_keys``, through the bridge's ``get_device_stats``: a plugin
with known readings, and the real CPU plugin.
"""

from __future__ import annotations

import math
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest

lightning = pytest.importorskip("lightning")

import torch  # noqa: E402
from lightning.pytorch.callbacks import DeviceStatsMonitor  # noqa: E402
from lightning.pytorch.loggers import Logger  # noqa: E402

import accelctl  # noqa: E402
import accelctl.stats_keys  # noqa: E402
from accelctl.integrations.lightning import LightningAccelerator  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "integrations"))
from tinymodel import TinyRegression, quiet_trainer_options, tiny_loader  # noqa: E402

#: The known readings of :class:`Gauges`' device, one key of each kind the vocabulary has.
READING: dict[str, int | float] = {
    "memory_allocated_bytes": 1 << 20,
    "memory_reserved_bytes": 2 << 20,
    "memory_total_bytes": 1 << 30,
    "utilization_percent": 42.0,
    "power_watts": 99.5,
    "temperature_celsius": float("nan"),  # supported, not readable now
    "gauges.fan_rpm": 1200,
}

#: DeviceStatsMonitor's prefixes: it reads the device at each batch's start and end.
HOOKS = ("on_train_batch_start", "on_train_batch_end")


class Gauges(accelctl.Accelerator):
    """An accelerator on the CPU's device whose stats are :data:`READING`, every time."""

    name = "gauges"
    device_type = "cpu"

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1

    def device_stats(self, device: Any) -> dict[str, int | float]:
        return dict(READING)


class Captured(Logger):
    """A logger that keeps every ``log_metrics`` call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "captured"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(
        self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any
    ) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append(dict(metrics))


def monitored(accelerator: LightningAccelerator) -> list[dict[str, float]]:
    """Train 4 steps with ``DeviceStatsMonitor``; what it logged (its own lines only)."""
    logger = Captured()
    options = {**quiet_trainer_options(), "logger": logger}
    trainer = lightning.Trainer(
        accelerator=accelerator,
        devices=1,
        max_steps=4,
        log_every_n_steps=1,
        callbacks=[DeviceStatsMonitor()],
        **options,
    )
    trainer.fit(TinyRegression(), tiny_loader())
    return [line for line in logger.logged if any("DeviceStatsMonitor." in k for k in line)]


def readings_of(lines: list[dict[str, float]], hook: str) -> list[dict[str, float]]:
    prefix = f"DeviceStatsMonitor.{hook}/"
    return [
        {key.removeprefix(prefix): value for key, value in line.items() if key.startswith(prefix)}
        for line in lines
        if any(key.startswith(prefix) for key in line)
    ]


def test_the_plugins_readings_arrive_as_they_were_read() -> None:
    lines = monitored(LightningAccelerator(Gauges()))
    for hook in HOOKS:
        readings = readings_of(lines, hook)
        assert len(readings) == 4  # every step (log_every_n_steps=1)
        for reading in readings:
            assert set(reading) == set(READING)
            for key, value in READING.items():
                if math.isnan(value):
                    assert math.isnan(reading[key])
                else:
                    assert reading[key] == value, key


def test_the_cpu_plugins_vocabulary_arrives() -> None:
    lines = monitored(LightningAccelerator("cpu"))
    readings = readings_of(lines, "on_train_batch_end")
    assert len(readings) == 4
    for reading in readings:
        assert {"utilization_percent", "memory_used_bytes", "memory_total_bytes"} <= set(reading)
        assert accelctl.stats_keys.problems(reading, ["cpu."]) == []
        assert reading["memory_total_bytes"] == pytest.approx(
            accelctl.get_accelerator("cpu").device_stats("cpu")["memory_total_bytes"]
        )
    assert torch.cuda.is_initialized() is False

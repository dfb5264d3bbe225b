"""The HPU plugin's available path, driven by a fake ``habana_frameworks`` (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import torch

import accelctl
from accelctl_hpu import HPUAccelerator

GIB = 2**30
FakeHabana = Callable[..., AbstractContextManager[Path]]


@pytest.mark.usefixtures("gaudi")
class TestWithTwoHPUs:
    def test_detected_with_both_devices(self) -> None:
        hpu = HPUAccelerator()
        assert hpu.detect() is True
        assert hpu.auto_device_count() == 2

    def test_devices_are_hpu_devices_in_rank_order(self) -> None:
        selection = accelctl.resolve(HPUAccelerator(), devices="auto")
        assert selection.devices == [torch.device("hpu", 0), torch.device("hpu", 1)]
        assert selection.distributed_backend == "hccl"
        assert accelctl.resolve(HPUAccelerator(), devices="1,").devices == [torch.device("hpu", 1)]

    def test_shared_parser_refuses_more_than_visible(self) -> None:
        with pytest.raises(accelctl.DeviceSpecError, match=r"2 hpu devices are visible"):
            HPUAccelerator().parse_devices(3)

    def test_visible_modules_limit_the_count(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HABANA_VISIBLE_MODULES", "1")
        assert HPUAccelerator().auto_device_count() == 1
        assert HPUAccelerator().parse_devices("auto") == [0]

    def test_visible_modules_empty_hides_every_hpu(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HABANA_VISIBLE_MODULES", "")
        hpu = HPUAccelerator()
        assert (hpu.detect(), hpu.auto_device_count()) == (False, 0)
        assert hpu.unavailable_reason() == "HABANA_VISIBLE_MODULES is set but lists no module"

    def test_visible_modules_malformed_is_a_reason_not_a_crash(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("HABANA_VISIBLE_MODULES", "all")
        hpu = HPUAccelerator()
        assert hpu.detect() is False
        assert "HABANA_VISIBLE_MODULES='all' is not a comma-separated list" in (
            hpu.unavailable_reason() or ""
        )

    def test_stats_map_habana_memory_stats_to_the_vocabulary(self) -> None:
        stats = HPUAccelerator().device_stats(torch.device("hpu", 0))
        assert stats["memory_allocated_bytes"] == 3 * GIB
        assert stats["memory_total_bytes"] == 96 * GIB
        assert stats["hpu.max_memory_allocated_bytes"] == 5 * GIB
        assert stats["hpu.num_allocs"] == 12
        assert all(isinstance(value, int) for value in stats.values())
        assert all(
            key.startswith("hpu.") or key in accelctl.testing.COMMON_STATS_KEYS for key in stats
        )


def test_stats_do_not_start_an_idle_runtime(tmp_path: Path, make_fake_habana: FakeHabana) -> None:
    with make_fake_habana(tmp_path, initialized=False):
        assert HPUAccelerator().device_stats(torch.device("hpu", 0)) == {}


def test_bridge_reporting_no_device(tmp_path: Path, make_fake_habana: FakeHabana) -> None:
    with make_fake_habana(tmp_path, devices=0):
        hpu = HPUAccelerator()
        assert (hpu.detect(), hpu.auto_device_count()) == (False, 0)
        assert "reports no HPU" in (hpu.unavailable_reason() or "")


def test_broken_habana_install_is_unavailable_not_an_exception(
    tmp_path: Path, make_fake_habana: FakeHabana
) -> None:
    with make_fake_habana(tmp_path, broken=True):
        hpu = HPUAccelerator()
        assert hpu.detect() is False
        reason = hpu.unavailable_reason() or ""
        assert "importing habana_frameworks.torch.hpu failed: ImportError: libsynapse" in reason

"""accelctl's conformance suite on the HPU plugin: one class per situation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import accelctl.testing
from accelctl_hpu import HPUAccelerator


class TestHPUConformance(accelctl.testing.AcceleratorConformance):
    """The installed plugin, as `accelctl validate hpu` sees it.

    There is no Gaudi here, so the device checks skip.
    """

    accelerator = "hpu"


class TestHPUConformanceOnFakeGaudi(accelctl.testing.AcceleratorConformance):
    """An instance, no entry point, with two fake HPUs: the device checks run."""

    accelerator = HPUAccelerator()

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _two_fake_hpus(
        cls, tmp_path_factory: pytest.TempPathFactory, make_fake_habana: Callable[..., Any]
    ) -> Iterator[None]:
        with make_fake_habana(tmp_path_factory.mktemp("habana")):
            cls.conformance_report()  # the checks run while the fake is installed
            yield

    def test_device_checks_ran(self) -> None:
        report = self.conformance_report()
        for check in ("devices_auto", "devices_minus_one", "devices_one", "device_stats"):
            assert report.result(check).status == "pass", report.result(check)
        assert "[hpu:0, hpu:1]" in report.result("devices_auto").detail


def test_fake_gaudi_needs_no_entry_point(
    tmp_path: Path, make_fake_habana: Callable[..., Any]
) -> None:
    with make_fake_habana(tmp_path, devices=4):
        report = accelctl.testing.assert_conforms(HPUAccelerator(), probe_import=False)
    assert report.name == "hpu" and report.distribution is None
    assert report.result("devices_auto").detail.endswith("hpu:2, hpu:3]")

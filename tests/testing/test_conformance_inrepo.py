"""The pytest face of the conformance suite on the in-repo plugins, as their vendors would use it.

Each class is the one line a plugin's CI needs; the device checks skip on a machine without the
hardware, and run where it is present (cuda on a GPU runner, mps on Apple silicon).
"""

from __future__ import annotations

import pytest

from accelctl.testing import AcceleratorConformance


class TestCPUConformance(AcceleratorConformance):
    accelerator = "cpu"

    def test_device_checks_ran(self) -> None:
        """The CPU is always there: its device checks must run, not skip."""
        report = self.conformance_report()
        for check in ("devices_auto", "devices_minus_one", "devices_one", "device_stats"):
            assert report.result(check).status == "pass", report.result(check)


class TestCUDAConformance(AcceleratorConformance):
    accelerator = "cuda"

    @pytest.fixture(autouse=True)
    def _installed(self) -> None:
        pytest.importorskip("accelctl_cuda")


class TestMPSConformance(AcceleratorConformance):
    accelerator = "mps"

    @pytest.fixture(autouse=True)
    def _installed(self) -> None:
        pytest.importorskip("accelctl_mps")


class TestHPUConformance(AcceleratorConformance):
    accelerator = "hpu"

    @pytest.fixture(autouse=True)
    def _installed(self) -> None:
        pytest.importorskip("accelctl_hpu")


class TestXPUConformance(AcceleratorConformance):
    accelerator = "xpu"

    @pytest.fixture(autouse=True)
    def _installed(self) -> None:
        pytest.importorskip("accelctl_xpu")


# The generic PrivateUse1 plugin (accelctl-torch-backend) is not checked in this process: its
# device checks need a loaded backend, which tests keep off (TORCH_DEVICE_BACKEND_AUTOLOAD=0, see
# conftest.py), so they could only skip here. `accelctl validate` runs every check on it against
# the real torch_openreg backend in plugins/torch-backend/tests/test_torch_backend_openreg.py.

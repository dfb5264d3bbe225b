"""Shared fixtures: a clean accelctl environment per test, and fake installed plugins."""

from __future__ import annotations

import os

# torch loads every installed out-of-tree backend (the torch.backends entry-point group) on
# `import torch`; the test environment installs torch_openreg for the tests that need it. Off for
# the test process and its children, set before anything can import torch: a test that needs
# the backend opts in by running a subprocess without this variable (see
# tests/plugins/test_torch_backend_openreg.py).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import accelctl

sys.path.insert(0, str(Path(__file__).parent))  # tests/fakedists.py is a helper, not a package

from fakedists import FakeSite

_ACCELCTL_VARS = (
    "ACCELCTL_ACCELERATOR",
    "ACCELCTL_PLUGINS",
    "ACCELCTL_DISABLE",
    "ACCELCTL_DEVICES",
)


@pytest.fixture(autouse=True)
def _clean_accelctl(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ACCELCTL_* variable from the caller's shell, and a fresh process-wide registry."""
    for var in _ACCELCTL_VARS:
        monkeypatch.delenv(var, raising=False)
    accelctl.reset_registry()
    yield
    accelctl.reset_registry()


@pytest.fixture
def fake_site(tmp_path: Path) -> Iterator[FakeSite]:
    """A folder of fake installed distributions, put on ``sys.path`` so their modules import and
    the default registry (CLI, ``accelctl.resolve``) sees them beside the real plugins. For a
    registry that sees *only* them: ``Registry(path=fake_site.path)``."""
    site = FakeSite(tmp_path / "site")
    sys.path.insert(0, str(site.root))  # so entry points can import the modules
    yield site
    sys.path.remove(str(site.root))
    site.forget_modules()

"""Shared fixtures: a clean accelctl environment per test, and fake installed plugins."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

# Tests see only what they set up: an out-of-tree torch backend installed in the environment
# (the torch_openreg wheel the suite installs) would otherwise load on every `import torch` and
# change what torch, and so "auto", sees in every test. Set before anything imports torch; the
# tests under tests/openreg/ turn the autoload back on in the processes they start.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

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

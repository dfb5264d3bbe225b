"""Shared fixtures: a clean accelctl environment per test, and fake installed plugins."""

from __future__ import annotations

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
    "ACCELCTL_HOOK_TIMEOUT",
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

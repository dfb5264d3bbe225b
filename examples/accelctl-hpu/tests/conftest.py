"""Fixtures of the HPU plugin's tests: a fake ``habana_frameworks`` package.

The fake stands in for Habana's software only (the bridge module ``habana_frameworks.torch.hpu``
with ``is_available``, ``device_count``, ``is_initialized`` and ``memory_stats``, and the ``hccl``
backend it registers in torch.distributed); the plugin under test is the real one.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelctl_hpu import accelerator

GIB = 2**30

FAKE_BRIDGE = """
DEVICES = {devices}
INITIALIZED = {initialized}
BROKEN = {broken}
if BROKEN:
    raise ImportError("libsynapse.so: cannot open shared object file")

def is_available():
    return DEVICES > 0

def device_count():
    return DEVICES

def is_initialized():
    return INITIALIZED

def memory_stats(device=None):
    return {{
        "Limit": 96 * {gib}, "InUse": 3 * {gib}, "MaxInUse": 5 * {gib}, "NumAllocs": 12,
        "NumFrees": 4, "ActiveAllocs": 8, "MaxAllocSize": {gib}, "TotalSystemAllocs": 2,
        "TotalSystemFrees": 0, "TotalActiveAllocs": 2,
    }}
"""


def _forget_habana() -> None:
    for name in [m for m in sys.modules if m == "habana_frameworks" or m.startswith("habana_")]:
        del sys.modules[name]
    accelerator._bridge.cache_clear()


@contextlib.contextmanager
def fake_habana(
    root: Path, devices: int = 2, initialized: bool = True, broken: bool = False
) -> Iterator[Path]:
    """Write a fake ``habana_frameworks`` under ``root`` and put it on ``sys.path``.

    It stays on ``sys.path`` for the block, then it and the plugin's cached bridge are
    forgotten.
    """
    package = root / "habana_frameworks"
    (package / "torch" / "hpu").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "torch" / "__init__.py").write_text("")
    source = FAKE_BRIDGE.format(devices=devices, initialized=initialized, broken=broken, gib=GIB)
    (package / "torch" / "hpu" / "__init__.py").write_text(textwrap.dedent(source))
    _forget_habana()
    sys.path.insert(0, str(root))
    try:
        with pytest.MonkeyPatch.context() as patch:
            # Habana's software registers its collective library for hpu tensors in
            # torch.distributed; the fake does too, for the block only.
            import torch.distributed as dist

            patch.setitem(dist.Backend.backend_capability, "hccl", ["hpu"])
            yield package
    finally:
        sys.path.remove(str(root))
        _forget_habana()


@pytest.fixture(autouse=True)
def _no_visible_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's HABANA_VISIBLE_MODULES never leaks into a test."""
    monkeypatch.delenv("HABANA_VISIBLE_MODULES", raising=False)


@pytest.fixture(scope="session")
def make_fake_habana() -> Callable[..., contextlib.AbstractContextManager[Path]]:
    """The :func:`fake_habana` factory, for tests that need other devices or a broken install."""
    return fake_habana


@pytest.fixture
def gaudi(tmp_path: Path) -> Iterator[Path]:
    """A fake Habana install with two HPUs, for one test."""
    with fake_habana(tmp_path / "habana") as package:
        yield package

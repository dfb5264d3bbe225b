"""Real installed distributions for tests: ``*.dist-info`` folders on a path, whose entry points
name real modules.

Discovery tests use these instead of mocking ``importlib.metadata``: a folder made here is what
``pip install`` leaves in site-packages (METADATA, entry_points.txt), written by
:func:`accelctl.testing.write_distribution`, the one builder the benchmark uses too. The plugins
they point at are the modules of ``tests/fixtures/fakeplugins`` (one per behaviour), installed
beside them as a vendor's package would be::

    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})

A module written for one test alone (a syntax error, an import that fails) can still be given as
source (``modules={name: source}``).
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from accelctl.testing import write_distribution

#: The folder that holds the fake plugins' package, :mod:`fakeplugins`.
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: The package of fake plugins: its modules are imported afresh by each test.
FIXTURE_PACKAGE = "fakeplugins"

# In this process as in the interpreters the tests start (FakeSite.path is their PYTHONPATH).
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))


def forget_fixture_modules() -> None:
    """Drop :mod:`fakeplugins` and its modules from ``sys.modules``: the next import runs them
    afresh, so a test never sees another test's gate or record, and "not imported" means not
    imported by this test."""
    for module in [m for m in sys.modules if m.partition(".")[0] == FIXTURE_PACKAGE]:
        del sys.modules[module]


class FakeSite:
    """A site-packages-like folder on which fake distributions are installed. A new one starts
    with the fake plugins unimported (:func:`forget_fixture_modules`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.modules: list[str] = []
        forget_fixture_modules()

    @property
    def path(self) -> list[str]:
        """The folders to scan and import from: the site, then the fake plugins' folder (which
        holds no distribution)."""
        return [str(self.root), str(FIXTURES)]

    def install(
        self,
        distribution: str,
        entry_points: Mapping[str, str],
        modules: Mapping[str, str] | None = None,
        version: str = "1.0",
        group: str = "accelctl.accelerators",
    ) -> Path:
        """Install ``distribution`` with ``entry_points`` (name -> "module:attr") in ``group``:
        a module of :mod:`fakeplugins` (``"fakeplugins.good:GoodAccelerator"``), or one of
        ``modules`` (module name -> source, dedented), written for one test."""
        info = write_distribution(
            self.root, distribution, entry_points, version=version, group=group, modules=modules
        )
        self.modules.extend(modules or {})
        return info

    def copy_installed(self, distribution: str) -> bool:
        """Copy what discovery reads of an installed distribution (its METADATA and
        entry_points.txt) onto this site, so a registry over this site sees it; its modules stay
        importable from where they are installed. False when it is not installed."""
        from importlib import metadata

        try:
            dist = metadata.distribution(distribution)
        except metadata.PackageNotFoundError:
            return False
        folder = re.sub(r"[-_.]+", "_", distribution)
        info = self.root / f"{folder}-{dist.version}.dist-info"
        info.mkdir()
        for name in ("METADATA", "entry_points.txt"):
            text = dist.read_text(name)
            if text is not None:
                (info / name).write_text(text)
        return True

    def install_raw(
        self,
        distribution: str,
        files: Mapping[str, str | bytes],
        modules: Mapping[str, str] | None = None,
        version: str = "1.0",
    ) -> Path:
        """Install ``distribution`` with its dist-info files written exactly as given (``str`` or
        ``bytes``): a malformed ``entry_points.txt``, a ``METADATA`` that is not UTF-8... A
        ``METADATA`` is written for it unless ``files`` has one."""
        info = write_distribution(
            self.root, distribution, version=version, modules=modules, files=files
        )
        self.modules.extend(modules or {})
        return info

    def forget_modules(self) -> None:
        """Drop the fake modules, this site's and :mod:`fakeplugins`', from ``sys.modules`` so
        the next test imports them afresh."""
        for module in self.modules:
            sys.modules.pop(module, None)
        forget_fixture_modules()


# -- plugin sources, for the test files not moved to tests/fixtures/fakeplugins yet -------------
# (tests/core/test_selection.py, test_device_bounds.py, test_errors.py,
# test_warnings_point_at_the_user.py, tests/trainer, tests/openreg, plugins/torch-backend/tests).
# New tests point their distributions at a fake plugin module instead of installing these strings.

GOOD_PLUGIN = """
    import accelctl

    @accelctl.hookimpl
    def detect():
        return True

    @accelctl.hookimpl
    def auto_device_count():
        return 2

    @accelctl.hookimpl
    def parse_devices(devices):
        return accelctl.parse_indexed_devices(devices, visible=2, accelerator="{name}")

    @accelctl.hookimpl
    def get_parallel_devices(devices):
        import torch
        return [torch.device("cpu") for _ in devices]

    @accelctl.hookimpl
    def device_stats(device):
        return {{"memory_used_bytes": 1}}

    @accelctl.hookimpl
    def accelerator_info():
        return {{"description": "{name} test accelerator", "priority": {priority},
                "family": {family!r}, "distributed_backend": "gloo", "aliases": {aliases!r}}}
"""

UNDETECTED_PLUGIN = """
    import accelctl

    @accelctl.hookimpl
    def detect():
        return False

    @accelctl.hookimpl
    def unavailable_reason():
        return "no {name} hardware here"

    @accelctl.hookimpl
    def auto_device_count():
        return 0

    @accelctl.hookimpl
    def parse_devices(devices):
        return accelctl.parse_indexed_devices(devices, visible=0, accelerator="{name}")

    @accelctl.hookimpl
    def get_parallel_devices(devices):
        import torch
        return [torch.device("cpu") for _ in devices]

    @accelctl.hookimpl
    def device_stats(device):
        return {{}}

    @accelctl.hookimpl
    def accelerator_info():
        return {{"family": {family!r}, "priority": {priority}, "aliases": {aliases!r}}}
"""


def good_plugin(
    name: str, priority: int = 10, family: str | None = None, aliases: tuple[str, ...] = ()
) -> str:
    """Source of a working module plugin that detects two devices."""
    return GOOD_PLUGIN.format(name=name, priority=priority, family=family, aliases=aliases)


def undetected_plugin(
    name: str, priority: int = 100, family: str | None = "gpu", aliases: tuple[str, ...] = ()
) -> str:
    """Source of a working module plugin whose hardware is absent."""
    return UNDETECTED_PLUGIN.format(name=name, priority=priority, family=family, aliases=aliases)


INDEXED_PLUGIN = """
    import accelctl

    @accelctl.hookimpl
    def detect():
        return {visible} > 0

    @accelctl.hookimpl
    def auto_device_count():
        return {visible}

    @accelctl.hookimpl
    def parse_devices(devices):
        return accelctl.parse_indexed_devices(devices, visible={visible}, accelerator={name!r})

    @accelctl.hookimpl
    def get_parallel_devices(devices):
        import torch
        return [torch.device({device_type!r}, i) for i in devices]

    @accelctl.hookimpl
    def device_stats(device):
        return {stats!r}

    @accelctl.hookimpl
    def accelerator_info():
        return {info!r}
"""


def indexed_plugin(
    name: str,
    *,
    visible: int = 2,
    device_type: str = "cpu",
    info: dict[str, object] | None = None,
    stats: dict[str, int | float] | None = None,
    extra: str = "",
) -> str:
    """Source of a module plugin with ``visible`` indexed devices of ``device_type`` (detected
    when there is at least one), the shared parser, ``info`` as its ``accelerator_info()`` and
    ``stats`` as its figures. ``extra`` is appended: a hook defined again there replaces the
    generated one (the later function of a module is the one registered)."""
    source = INDEXED_PLUGIN.format(
        name=name, visible=visible, device_type=device_type, info=info or {}, stats=stats or {}
    )
    return textwrap.dedent(source) + textwrap.dedent(extra)

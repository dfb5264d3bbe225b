"""Real installed distributions for tests: ``*.dist-info`` folders whose entry points name modules.

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
    """Drop :mod:`fakeplugins` and its modules from ``sys.modules``.

    The next import runs them afresh: a test never sees another test's gate or record, and "not
    imported" means not imported by this test.
    """
    for module in [m for m in sys.modules if m.partition(".")[0] == FIXTURE_PACKAGE]:
        del sys.modules[module]


class FakeSite:
    """A site-packages-like folder on which fake distributions are installed.

    A new one starts with the fake plugins unimported (:func:`forget_fixture_modules`).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.modules: list[str] = []
        forget_fixture_modules()

    @property
    def path(self) -> list[str]:
        """Return the folders to scan and import from: the site, then the fake plugins' folder.

        The fake plugins' folder holds no distribution.
        """
        return [str(self.root), str(FIXTURES)]

    def install(
        self,
        distribution: str,
        entry_points: Mapping[str, str],
        modules: Mapping[str, str] | None = None,
        version: str = "1.0",
        group: str = "accelctl.accelerators",
    ) -> Path:
        """Install ``distribution`` with ``entry_points`` (name -> "module:attr") in ``group``.

        Each points at a module of :mod:`fakeplugins` (``"fakeplugins.good:GoodAccelerator"``), or
        one of ``modules`` (module name -> source, dedented), written for one test.
        """
        info = write_distribution(
            self.root, distribution, entry_points, version=version, group=group, modules=modules
        )
        self.modules.extend(modules or {})
        return info

    def copy_installed(self, distribution: str) -> bool:
        """Copy an installed distribution's METADATA and entry_points.txt onto this site.

        A registry over this site then sees it; its modules stay importable from where they are
        installed. False when it is not installed.
        """
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
        """Install ``distribution`` with its dist-info files written exactly as given.

        As ``str`` or ``bytes``: A malformed ``entry_points.txt``, a ``METADATA`` that is not
        UTF-8... A ``METADATA`` is written for it unless ``files`` has one.
        """
        info = write_distribution(
            self.root, distribution, version=version, modules=modules, files=files
        )
        self.modules.extend(modules or {})
        return info

    def forget_modules(self) -> None:
        """Drop the fake modules, this site's and :mod:`fakeplugins`', from ``sys.modules``.

        The next test imports them afresh.
        """
        for module in self.modules:
            sys.modules.pop(module, None)
        forget_fixture_modules()


#: ``deepspeed/runtime/zero/utils.py`` of a DeepSpeed from 0.19.6 on, and of one before it.
NORMS_FOLLOW_DEVICE_UTILS = "def get_norm_dtype(accelerator):\n    return None\n"
NORMS_IN_FLOAT64_UTILS = "def get_grad_norm(parameters):\n    return 0.0\n"


def install_fake_deepspeed(site: FakeSite, utils: str, version: str = "1.0") -> None:
    """Install on ``site`` a DeepSpeed whose ``runtime/zero/utils.py`` holds ``utils`` alone.

    First on the path: What accelctl reads of DeepSpeed without importing it. The caller drops a
    DeepSpeed already imported (``sys.modules``).
    """
    site.install_raw("deepspeed", {}, version=version)
    zero = site.root / "deepspeed" / "runtime" / "zero"
    zero.mkdir(parents=True)
    for folder in (zero.parents[1], zero.parent, zero):
        (folder / "__init__.py").write_text("")
    (zero / "utils.py").write_text(utils)

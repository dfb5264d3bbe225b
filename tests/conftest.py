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

#: A scheduler's or launcher's variables that the Trainer and ``accelctl launch`` read (the suite
#: run inside an srun step, a MASTER_ADDR exported in the shell): no test sees them unless it sets
#: them itself.
_SCHEDULER_PREFIXES = ("SLURM_", "PET_", "OMPI_COMM_WORLD_")
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
_LAUNCHER_VARS += ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")

#: The hook deadline in tests and the processes they start. accelctl's default (10 s) is for
#: people; here a plugin that imports torch inside a hook (seconds on a loaded 2-core machine)
#: must never be reported as hung by chance, so the deadline is only a hang guard. The tests of
#: the deadline itself set their own.
HOOK_TIMEOUT_S = "120"


ROOT = Path(__file__).resolve().parents[1]


def _project_distributions() -> list[str]:
    """The plugin distributions this repository ships (plugins/*, examples/accelctl-*)."""
    import tomllib

    projects = [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("examples/*/pyproject.toml")]
    return sorted(tomllib.loads(p.read_text())["project"]["name"] for p in projects)


@pytest.fixture(scope="session")
def project_site(tmp_path_factory: pytest.TempPathFactory) -> FakeSite:
    """The in-repo plugins as installed in this environment, and nothing else: another plugin
    installed here (a vendor's ``accelctl-npu``, say) is not on it."""
    site = FakeSite(tmp_path_factory.mktemp("project-site"))
    for distribution in _project_distributions():
        site.copy_installed(distribution)
    return site


def _use_default_registry(monkeypatch: pytest.MonkeyPatch, *sites: FakeSite) -> None:
    """Make the process-wide registry (the CLI's, ``accelctl.resolve``'s) scan ``sites`` only."""
    registry = accelctl.Registry(path=[str(site.root) for site in sites])
    monkeypatch.setattr(accelctl._registry, "_default", registry)


@pytest.fixture(autouse=True)
def _clean_accelctl(monkeypatch: pytest.MonkeyPatch, project_site: FakeSite) -> Iterator[None]:
    """No ACCELCTL_* variable from the caller's shell (nor a scheduler's or a launcher's), and a
    fresh process-wide registry that sees the in-repo plugins only: each test sees the plugins
    it sets up, whatever else is installed."""
    for var in _ACCELCTL_VARS:
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if var.startswith(_SCHEDULER_PREFIXES) or var in _LAUNCHER_VARS:
            monkeypatch.delenv(var)
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", HOOK_TIMEOUT_S)
    _use_default_registry(monkeypatch, project_site)
    yield
    accelctl.reset_registry()


@pytest.fixture
def fake_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project_site: FakeSite
) -> Iterator[FakeSite]:
    """A folder of fake installed distributions, put on ``sys.path`` so their modules import and
    the default registry (CLI, ``accelctl.resolve``) sees them beside the in-repo plugins. For a
    registry that sees *only* them: ``Registry(path=fake_site.path)``."""
    site = FakeSite(tmp_path / "site")
    sys.path.insert(0, str(site.root))  # so entry points can import the modules
    _use_default_registry(monkeypatch, site, project_site)
    yield site
    sys.path.remove(str(site.root))
    site.forget_modules()

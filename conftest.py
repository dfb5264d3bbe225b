"""The fixtures every test of the repository shares: a clean environment, fake installed plugins.

For tests/, plugins/*/tests/ and examples/*/tests/: a clean accelctl environment per test, and fake
installed plugins (tests/fakedists.py).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

# Tests see only what they set up: an out-of-tree torch backend installed in the environment
# (the torch_openreg wheel the suite installs) would otherwise load on every `import torch` and
# change what torch, and so "auto", sees in every test. Set before anything imports torch; the
# tests under tests/openreg/ turn the autoload back on in the processes they start.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
# The suite runs tests in parallel (pytest-xdist), many of them starting processes that train:
# one torch thread each, not one per core each, which would only add contention.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

import accelctl.testing

sys.path.insert(0, str(Path(__file__).parent / "tests"))  # tests/fakedists.py: a helper module

from cliharness import Cli

from fakedists import FakeSite

#: The machines of the openreg tests, shared by every test session's (tests/openregmachine.py).
pytest_plugins = ["openregmachine"]

_ACCELCTL_VARS = (
    "ACCELCTL_ACCELERATOR",
    "ACCELCTL_PLUGINS",
    "ACCELCTL_DISABLE",
    "ACCELCTL_DEVICES",
    "ACCELCTL_COLLECTIVE_TIMEOUT",
    "ACCELCTL_LAUNCHER_PID",
)
#: What a launcher or a cluster scheduler sets in the processes it starts: a test that ran inside
#: a SLURM job, an MPI run or torchrun would otherwise see itself as one rank of it.
_CLUSTER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
_CLUSTER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "PET_")

#: The hook deadline in tests and the processes they start. accelctl's default (10 s) is for
#: people; here a plugin that imports torch inside a hook (seconds on a loaded 2-core machine)
#: must never be reported as hung by chance, so the deadline is only a hang guard. The tests of
#: the deadline itself set their own.
HOOK_TIMEOUT_S = "120"


ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """Give Ctrl-C as a terminal gives it, in this process and the processes the tests start.

    A shell's background job (``bash scripts/test &``) starts with SIGINT ignored, which Python then
    keeps, and the tests of Ctrl-C would see a program that cannot be interrupted.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the tests longest first, so that the many short tests fill the gaps at the end.

    The tests on a real cluster (marked ``ray`` or ``slurm``: minutes of one worker's time, most of
    it waiting), then the other ``slow`` tests, then the rest, each class in collection order.
    noxfile.py hands whole modules to the workers (``--dist loadscope``) in this order.
    """

    def weight(item: pytest.Item) -> tuple[bool, bool]:
        on_a_cluster = any(item.get_closest_marker(name) for name in ("ray", "slurm"))
        return not on_a_cluster, item.get_closest_marker("slow") is None

    items.sort(key=weight)


def _project_distributions() -> list[str]:
    """The plugin distributions this repository ships (plugins/*, examples/accelctl-*)."""
    import tomllib

    projects = [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("examples/*/pyproject.toml")]
    return sorted(tomllib.loads(p.read_text())["project"]["name"] for p in projects)


@pytest.fixture(scope="session")
def project_site(tmp_path_factory: pytest.TempPathFactory) -> FakeSite:
    """A site of the in-repo plugins as installed in this environment, and nothing else.

    Another plugin installed here (a vendor's ``accelctl-npu``, say) is not on it.
    """
    site = FakeSite(tmp_path_factory.mktemp("project-site"))
    for distribution in _project_distributions():
        site.copy_installed(distribution)
    return site


@pytest.fixture(autouse=True)
def _clean_accelctl(monkeypatch: pytest.MonkeyPatch, project_site: FakeSite) -> Iterator[None]:
    """Clear ACCELCTL_* variables and give each test a fresh registry of the in-repo plugins only.

    No variable from the caller's shell, and a fresh process-wide registry: each test sees the
    plugins it sets up, whatever else is installed.
    """
    for var in _ACCELCTL_VARS + _CLUSTER_VARS:
        # setenv first: monkeypatch.delenv of an unset variable records nothing, and what the
        # code under test then sets in os.environ would reach the worker's next tests.
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    for var in [name for name in os.environ if name.startswith(_CLUSTER_PREFIXES)]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", HOOK_TIMEOUT_S)
    with accelctl.testing.installed_plugins(project_site.root):
        yield
    # A Trainer or a bridge set the device's kernels up once for this process: not for the next
    # test (imported only where one did; the module holds the setups and their torch kernels).
    kernels = sys.modules.get("accelctl._kernels.setup")
    if kernels is not None:
        kernels.forget()


@pytest.fixture
def fake_site(tmp_path: Path, project_site: FakeSite) -> Iterator[FakeSite]:
    """A folder of fake installed distributions on ``sys.path``, seen beside the in-repo plugins.

    Their modules import and the default registry (CLI, ``accelctl.resolve``) sees them. For a
    registry that sees *only* them: ``accelctl.testing.Registry(path=fake_site.path)``.
    """
    site = FakeSite(tmp_path / "site")
    sys.path.insert(0, str(site.root))  # so entry points can import the modules
    with accelctl.testing.installed_plugins(site.root, project_site.root):
        yield site
    sys.path.remove(str(site.root))
    site.forget_modules()


@pytest.fixture
def no_scheduler_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``PATH`` this interpreter's folder alone, hiding the machine's SLURM from Lightning.

    Lightning looks for SLURM's ``srun`` there (and warns when a machine has it but the process was
    not started with it), so tests of Lightning's defaults must not see what the machine has
    installed.
    """
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))


@pytest.fixture
def cli() -> Cli:
    """``accelctl`` commands, in this process or in a fresh interpreter (tests/cliharness.py)."""
    return Cli()

"""Tests on a real out-of-tree backend: PyTorch's own ``torch_openreg`` (a PrivateUse1 device
``openreg``, two emulated devices, no ``torch.distributed`` backend), with the third-party plugin
``tests/thirdparty/accelctl-openreg`` installed by pip, as a user would.

Everything runs in processes of its own, started with torch's backend autoload on (as on a
user's machine) and with the plugin's pip target on ``PYTHONPATH``: the test process itself keeps
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (see ``conftest.py``), so no other test sees openreg.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

THIRD_PARTY = Path(__file__).parents[1] / "thirdparty"

#: A hang guard only: each process imports torch and the backend (seconds on a loaded 2-core
#: machine); nothing here is timed.
PROCESS_TIMEOUT_S = 300


def _require_wheel() -> None:
    if importlib.util.find_spec("torch_openreg") is not None:
        return
    message = (
        "torch_openreg is not installed: scripts/test installs it from ../shared/backends/ "
        "(built for CPython 3.11 and torch 2.13.0 only)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; under CI it must run", pytrace=False)
    pytest.skip(message)


@dataclass
class UserMachine:
    """A machine with torch_openreg and whatever plugins are on ``path``, seen from new
    processes."""

    path: list[Path]

    def environ(self, **extra: str) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key == "ACCELCTL_HOOK_TIMEOUT"  # the tests' hang guard (conftest.py)
            or (not key.startswith("ACCELCTL_") and key != "TORCH_DEVICE_BACKEND_AUTOLOAD")
        }
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in self.path)
        env.update(extra)
        return env

    def accelctl(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """``accelctl ARGS`` as the user types it."""
        return subprocess.run(
            [sys.executable, "-m", "accelctl", *args],
            capture_output=True,
            text=True,
            env=self.environ(**extra),
            timeout=PROCESS_TIMEOUT_S,
        )

    def python(self, code: str, **extra: str) -> Any:
        """Run ``code`` (which prints one JSON document last) and return that document."""
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=self.environ(**extra),
            timeout=PROCESS_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def pip_install_target(package: Path, target: Path) -> None:
    """``pip install`` a plugin into ``target`` (offline: no index, no build isolation)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(package),
        ],
        check=True,
        capture_output=True,
        timeout=PROCESS_TIMEOUT_S,
    )


@pytest.fixture(scope="session")
def openreg_plugin_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third-party ``accelctl-openreg`` plugin, pip-installed once into a folder of its own
    (a copy of the sources, so the build leaves nothing in the checkout)."""
    import shutil

    _require_wheel()
    work = tmp_path_factory.mktemp("openreg-plugin")
    source = work / "accelctl-openreg"
    shutil.copytree(THIRD_PARTY / "accelctl-openreg", source)
    target = work / "site"
    pip_install_target(source, target)
    return target


@pytest.fixture
def machine(openreg_plugin_target: Path) -> Iterator[UserMachine]:
    """torch_openreg plus the accelctl-openreg plugin (and the in-repo plugins installed in the
    environment)."""
    yield UserMachine([openreg_plugin_target])


@pytest.fixture(autouse=True)
def _scheduler_free(no_scheduler_on_path: None) -> None:
    """The processes started here see no cluster scheduler the machine may have (Lightning
    looks for SLURM's ``srun`` on ``PATH``)."""

"""The machines of the tests on a real out-of-tree backend: PyTorch's own ``torch_openreg``.

A PrivateUse1 device ``openreg``, two emulated devices, as a user would run it. A pytest plugin (the
root ``conftest.py`` registers it), so that the openreg tests of every test session (core,
Lightning, Hugging Face, Ray) share its fixtures.

Each test session installs **0.0.3** (``noxfile.py``): its collective backend ``occl`` carries
openreg tensors between processes, and it has what FSDP2 and DCP need (streams and events, storage
resize, a device RNG that restores a draw). The generic ``privateuse1`` plugin (installed in the
environment) serves it with ``occl``, and ``occl_machine`` runs on it. The third-party plugin
``tests/thirdparty/accelctl-openreg`` (``machine``) declares no backend, as a vendor's plugin for a
one-process device does. Two older wheels are pip-installed into folders of their own and put first
on ``PYTHONPATH``, for the tests whose subject is what they lack: **0.0.2** (``fsdp_gaps_machine``),
``occl`` without the device streams and storage resize FSDP2 needs and with a device RNG that does
not restore; **0.0.1** (``no_backend_machine``), the backend without any collective backend: there
torch itself has no backend for openreg, so the refusals of several processes are tested on a real
device that cannot run them.

Everything runs in processes of its own, started with torch's backend autoload on (as on a
user's machine): the test process itself keeps ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (see
``conftest.py``), so no other test sees openreg.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sharedrun import shared_run

__all__ = ["shared_run"]  # the openreg tests import it from here

THIRD_PARTY = Path(__file__).parent / "thirdparty"
#: Where noxfile.py found the wheels (``ACCELCTL_TEST_BACKENDS``; else ``../shared/backends``
#: beside the checkout).
BACKENDS = Path(
    os.environ.get("ACCELCTL_TEST_BACKENDS") or Path(__file__).parents[2] / "shared" / "backends"
)
#: The wheel the suite installs; the one without FSDP2's streams and storage resize; the one
#: without a collective backend.
SUITE_VERSION, GAPS_VERSION, NO_BACKEND_VERSION = "0.0.3", "0.0.2", "0.0.1"

#: A hang guard only: each process imports torch and the backend (seconds on a loaded 2-core
#: machine); nothing here is timed.
PROCESS_TIMEOUT_S = 300
#: How torch_openreg (0.0.2 and 0.0.3) ends a process now and then, after its work is done: its
#: emulated streams run on C++ threads that can still be joinable when the interpreter's static
#: objects are destroyed, and the C++ runtime aborts (SIGABRT) with this last line. Rare, and more
#: likely on a loaded machine; the backend's, not accelctl's: accelctl has no C++ and starts no
#: such thread.
OPENREG_EXIT_ABORT = "terminate called without an active exception"


def _missing(message: str) -> None:
    """Skip, except under CI, where a missing backend is a failure."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; under CI it must run", pytrace=False)
    pytest.skip(message)


def _require_wheel() -> None:
    if importlib.util.find_spec("torch_openreg") is None:
        _missing(
            f"torch_openreg is not installed: every test session installs {SUITE_VERSION} from "
            "../shared/backends/ (built for CPython 3.11 and torch 2.13.0 only)"
        )
    found = importlib.metadata.version("torch_openreg")
    if found != SUITE_VERSION:
        _missing(f"torch_openreg {found} is installed; these tests need {SUITE_VERSION}")


#: What the processes started here do not inherit from the test's environment: accelctl's,
#: Accelerate's and Ray's choices (a Ray user's RAY_ADDRESS), a scheduler's or launcher's
#: variables (the tests say what they want).
_NOT_INHERITED = ("ACCELCTL_", "ACCELERATE_", "SLURM_", "TORCHELASTIC_", "TORCH_DEVICE_BACKEND_",
                  "RAY_")  # fmt: skip
_LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                       "MASTER_PORT", "HF_HOME")  # fmt: skip


@dataclass
class UserMachine:
    """A machine with torch_openreg and the plugins on ``path``, seen from new processes."""

    path: list[Path]

    def environ(self, **extra: str) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key == "ACCELCTL_HOOK_TIMEOUT"  # the tests' hang guard (conftest.py)
            or not (key.startswith(_NOT_INHERITED) or key in _LAUNCHER_VARIABLES)
        }
        # The tests' hang guard, also for the module-scoped runs, made before the autouse
        # fixture sets it (a loaded machine took over accelctl's 10 s to import torch and the
        # backend in privateuse1's probe, and `--accelerator openreg` then found no such alias).
        env.setdefault("ACCELCTL_HOOK_TIMEOUT", "120")  # conftest.py's HOOK_TIMEOUT_S
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in self.path)
        # No scheduler the machine may have (Lightning looks for SLURM's srun on PATH), also
        # for the module-scoped runs, made before the function-scoped _scheduler_free.
        env["PATH"] = str(Path(sys.executable).parent)
        env.update(extra)
        return env

    def run(
        self, *argv: str, cwd: Path | None = None, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        """A command on this machine, its output captured."""
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=self.environ(**extra),
            timeout=PROCESS_TIMEOUT_S,
            cwd=cwd,
        )

    def accelctl(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """``accelctl ARGS`` as the user types it."""
        return self.run(sys.executable, "-m", "accelctl", *args, **extra)

    def python(self, code: str, **extra: str) -> Any:
        """Run ``code`` (which prints one JSON document last) and return that document."""
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=self.environ(**extra),
            timeout=PROCESS_TIMEOUT_S,
        )
        assert done.returncode == 0 or aborted_at_exit(done), done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def aborted_at_exit(done: subprocess.CompletedProcess[str]) -> bool:
    """Whether ``done`` ended by torch_openreg's abort at the interpreter's exit, and only by it.

    ``OPENREG_EXIT_ABORT``, only as the process's very last words, after whatever it wrote (the
    tests then read what it wrote, so a run cut short still fails).
    """
    return done.returncode == -signal.SIGABRT and done.stderr.rstrip().endswith(OPENREG_EXIT_ABORT)


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
    """Pip-install the third-party ``accelctl-openreg`` plugin once, into a folder of its own.

    From a copy of the sources, so the build leaves nothing in the checkout.
    """
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
    """torch_openreg plus the accelctl-openreg plugin (and the in-repo plugins installed)."""
    yield UserMachine([openreg_plugin_target])


@pytest.fixture(scope="session")
def occl_machine() -> UserMachine:
    """The suite's torch_openreg (``occl``, FSDP2 and DCP) with the in-repo plugins only.

    ``openreg`` is the generic ``privateuse1`` plugin, whose backend is the one torch maps the
    device type to.
    """
    _require_wheel()
    return UserMachine([])


def _wheel_machine(version: str, factory: pytest.TempPathFactory) -> UserMachine:
    """Return a machine with torch_openreg ``version`` first on the path, before the suite's wheel.

    Pip-installed into a folder of its own; ``import torch`` loads it.
    """
    _require_wheel()
    wheels = sorted(BACKENDS.glob(f"torch_openreg-{version}-*.whl"))
    if not wheels:
        _missing(f"no torch_openreg-{version} wheel in {BACKENDS}")
    target = factory.mktemp(f"openreg-{version}")
    pip_install_target(wheels[0], target)
    return UserMachine([target])


@pytest.fixture(scope="session")
def no_backend_machine(tmp_path_factory: pytest.TempPathFactory) -> UserMachine:
    """torch_openreg 0.0.1, which has no collective backend: torch maps no backend to openreg."""
    return _wheel_machine(NO_BACKEND_VERSION, tmp_path_factory)


@pytest.fixture(scope="session")
def fsdp_gaps_machine(tmp_path_factory: pytest.TempPathFactory) -> UserMachine:
    """torch_openreg 0.0.2: ``occl``, but none of FSDP2's streams or storage resize, no RNG restore.

    No device streams, no storage resize, and random draws that a restored RNG state does not
    repeat.
    """
    return _wheel_machine(GAPS_VERSION, tmp_path_factory)


#: The message of the ``accelctl.ProcessSetupError`` that ``make()`` raised, or None: the
#: first lines of a script run on ``no_backend_machine``.
REFUSED = """
    import json, os
    import torch, torch_openreg, accelctl

    def refused(make):
        try:
            make()
        except accelctl.ProcessSetupError as error:
            return str(error)
        return None
"""


def assert_single_process_refusal(message: str | None) -> None:
    """accelctl's refusal of several processes on openreg without a backend."""
    assert message is not None
    # The backend as the user knows it (issue 26), not the generic plugin's name privateuse1.
    assert "'openreg' runs in a single process only" in message
    assert "distributed_backend is None" in message


def temporary_folder(out: Path) -> str:
    """Return a ``TMPDIR`` for a run's processes, in the run's folder.

    What third-party launchers leave in the temporary folder (torchrun's ``torchelastic_*`` folder,
    which it never removes) stays with the test's files, not in the machine's ``/tmp``.
    """
    folder = out / "tmp"
    folder.mkdir(exist_ok=True)
    return str(folder)


def succeeded(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Return ``done``, asserted to have exited 0 or by torch_openreg's abort at the exit.

    The abort after its work (:func:`aborted_at_exit`); its error output in the assertion otherwise.
    """
    assert done.returncode == 0 or aborted_at_exit(done), done.stderr[-4000:]
    return done

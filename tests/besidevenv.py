"""Packages the test command installs beside the virtual environment, not in it.

A framework that probes for a package at import imports it whenever it is installed: torchmetrics
(Lightning's) imports transformers' ``AutoModel`` when transformers is there, and scipy when
scikit-learn is, about a second of CPU each in every process that imports Lightning. So
``scripts/test`` installs transformers (for its bridge's tests) and scikit-learn (for
``examples/cv_example.py``) each in a folder of its own beside the venv, and only the tests that
need one put it on their path: in-process with :func:`put_on_path`, for the processes they start
with :func:`pythonpath`. Ray Train too (its tensorboardX would change Lightning's default logger),
installed while the tests run: its tests wait for it (:func:`wait_for_install`).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest

#: transformers, at the versions of pyproject.toml's ``transformers`` extra.
TRANSFORMERS = Path(sys.prefix) / "transformers"
#: scikit-learn, for the digits of ``examples/cv_example.py``.
CV_EXAMPLE = Path(sys.prefix) / "cv-example"
#: Ray Train, at the versions of pyproject.toml's ``ray`` extra, installed while the tests run.
RAY = Path(sys.prefix) / "ray"

#: A hang guard only: how long a test waits for the background install of Ray to end (a minute
#: of download on the project's machine; a slow mirror can take several). The install itself
#: ends one way or the other: it marks its folder ready or failed (scripts/test).
INSTALL_TIMEOUT_S = 600


def require(folder: Path, module: str) -> Path:
    """``folder`` if ``module`` is installed there; else skip (fail under CI, where the test
    command installs it)."""
    if (folder / module).is_dir():
        return folder
    _missing(f"{module} is not installed in {folder} (bash scripts/test installs it there)")


def skip_module_unless(folder: Path, module: str) -> None:
    """At a test module's top: skip the module unless ``module`` is importable here or
    installed in ``folder`` (a collection error under CI, where the test command installs it)."""
    if available(folder, module):
        return
    message = f"{module} is not installed in {folder} (bash scripts/test installs it there)"
    if os.environ.get("CI") == "true":
        raise RuntimeError(message)
    pytest.skip(message, allow_module_level=True)


def available(folder: Path, module: str) -> bool:
    """Whether ``module`` is importable here or installed in ``folder``."""
    return (folder / module).is_dir() or importlib.util.find_spec(module) is not None


def wait_for_install(folder: Path, module: str) -> Path:
    """``folder`` once the install ``scripts/test`` runs in the background has put ``module``
    there (it renames ``<folder>.partial`` to ``folder``, marked ``.accelctl-ready``, when
    complete); skip (fail under CI) where it failed, was interrupted or was never started."""
    partial = folder.with_name(folder.name + ".partial")
    deadline = time.monotonic() + INSTALL_TIMEOUT_S
    while not (folder / ".accelctl-ready").exists():
        if (folder / ".accelctl-failed").exists():
            _missing(
                f"installing {module} into {folder} failed: its log is {folder}/.accelctl-failed"
            )
        if not _installing(partial):
            if partial.exists():
                _missing(
                    f"installing {module} into {folder} was interrupted "
                    "(bash scripts/test installs it again)"
                )
            _missing(f"{module} is not installed in {folder} (bash scripts/test installs it there)")
        if time.monotonic() > deadline:
            _missing(f"installing {module} into {partial} has not ended in {INSTALL_TIMEOUT_S} s")
        time.sleep(0.5)
    return folder


def _installing(partial: Path) -> bool:
    """Whether the process that writes ``partial`` still runs (its id is in the folder)."""
    try:
        os.kill(int((partial / ".accelctl-installing").read_text()), 0)
    except (OSError, ValueError):  # no folder, no id yet or any more, no such process
        return False
    return True


def _missing(message: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def put_on_path(folder: Path) -> None:
    """Make ``folder``'s packages importable in this process (once; first on the path)."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
        importlib.invalidate_caches()


def pythonpath(*folders: Path) -> str:
    """A ``PYTHONPATH`` for a new process: ``folders`` first, then this process's own."""
    return os.pathsep.join([*map(str, folders), *filter(None, [os.environ.get("PYTHONPATH")])])

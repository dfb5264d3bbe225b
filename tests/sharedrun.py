"""A multi-process run that several tests read, made once per test session.

The openreg tests' and the Trainer's FSDP tests share it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]
) -> Path:
    """Return the folder where ``make(folder)`` ran, once per test session.

    Whichever pytest-xdist worker asks first makes it; the workers that need it meanwhile wait for
    it (it uses the machine's cores anyway).
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    # Under pytest-xdist each worker's folder is a sibling in the session's own folder.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder

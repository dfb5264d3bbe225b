"""The commands every section times: ``accelctl``, the floor and peer scripts, Python baselines.

Built one way: the ``accelctl`` console script run by this interpreter, the floor and peer scripts
of this folder, and the Python baselines.

Knowing which top-level modules the installed plugins live in lets a section count, from the
modules a command imported, how many plugins it loaded.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

from .measure import Command, console_script, python_argv

HERE = Path(__file__).resolve().parent
ENTRY_POINT_GROUP = "accelctl.accelerators"


def accelctl(label: str, *args: str, env: Mapping[str, str] | None = None) -> Command:
    """Return ``accelctl ARGS`` as a user types it: the console script, else the CLI's ``main``.

    The installed console script runs through this interpreter, so ``-X importtime`` can be added.
    """
    script = console_script("accelctl")
    if script is not None:
        argv = python_argv(str(script), *args)
    else:
        argv = python_argv("-c", "from accelctl.cli import main; main()", *args)
    return Command(label, argv, dict(env or {}))


def python_code(label: str, code: str, env: Mapping[str, str] | None = None) -> Command:
    """``python -c CODE``."""
    return Command(label, python_argv("-c", code), dict(env or {}))


def floor(env: Mapping[str, str] | None = None) -> Command:
    """The floor: click + pluggy + one entry-point scan (``bench/floor.py``)."""
    return Command(
        "floor (click + pluggy + scan)",
        python_argv(str(HERE / "floor.py"), "list"),
        dict(env or {}),
    )


def lightning_peer() -> Command | None:
    """Lightning's own accelerator listing, or None when Lightning is not installed."""
    if importlib.util.find_spec("lightning") is None and (
        importlib.util.find_spec("pytorch_lightning") is None
    ):
        return None
    return Command("Lightning: list accelerators", python_argv(str(HERE / "lightning_peer.py")))


def plugin_modules(extra_path: Sequence[str] = ()) -> dict[str, str]:
    """Map each top-level module to its accelerator name, for the entry points a child would see.

    The child's path starts with ``extra_path``.
    """
    dists = list(metadata.distributions(path=list(extra_path))) if extra_path else []
    dists += list(metadata.distributions())
    modules: dict[str, str] = {}
    for dist in dists:
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                modules.setdefault(ep.module.partition(".")[0], ep.name)
    return modules


def pythonpath(*folders: str) -> dict[str, str]:
    """An environment entry putting ``folders`` in front of the child's module path."""
    current = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*folders, *([current] if current else [])])}

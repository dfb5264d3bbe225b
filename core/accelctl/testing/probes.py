"""Measurements for the conformance checks.

Is CUDA initialised, what importing a plugin costs in a fresh interpreter, whether a distributed
backend exists. Only the device checks import torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

# The check the core makes before a launch or a Trainer starts processes; the kit reports it.
from accelctl._choice.distributed_backend import backend_problem as backend_problem

#: Modules a plugin must not import at module level (the contract's "cheap imports" rule).
HEAVY_MODULES = ("torch",)

_PROBE = """
import importlib, json, sys, time
import accelctl  # the core's own import cost is not the plugin's
heavy = {heavy!r}
before = {{name for name in heavy if name in sys.modules}}
start = time.perf_counter()
try:
    importlib.import_module(sys.argv[1])
except BaseException as exc:  # a sys.exit() at the module's import too: reported, not the exit
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    print(json.dumps({{"error": f"{{type(exc).__name__}}: {{exc}}", "missing": missing}}))
else:
    seconds = time.perf_counter() - start
    imported = sorted(name for name in heavy if name in sys.modules and name not in before)
    print(json.dumps({{"seconds": seconds, "heavy": imported}}))
"""


def cuda_initialized() -> bool | None:
    """Return ``torch.cuda.is_initialized()`` when torch is imported, else None.

    None when it is not (so no CUDA context can exist through torch). Never imports torch."""
    from accelctl.torch_build import loaded_torch

    torch = loaded_torch()
    if torch is None:
        return None
    return bool(torch.cuda.is_initialized())


def import_torch_without_backends() -> Callable[[], list[str]] | None:
    """Import torch without its out-of-tree backends and return what loads them.

    What loads them raises what a backend raises. A vendor runtime that comes through torch's
    backend autoload (``torch_npu``, ``torch_openreg``) is timed with the plugin's first
    ``detect()``.

    :returns: None when torch was imported already, its backends with it.
    """
    if "torch" in sys.modules:
        return None
    from accelctl.torch_build import import_torch_alone, load_backends

    import_torch_alone()
    return lambda: load_backends(strict=True)


@dataclass(frozen=True)
class ImportProbe:
    """What importing one module in a fresh interpreter did.

    ``error`` when the import failed, ``unreachable`` when the module cannot be found by name
    (defined in a test or ``__main__``)."""

    seconds: float = 0.0
    heavy: tuple[str, ...] = ()
    error: str | None = None
    unreachable: bool = False


def fresh_interpreter_environment() -> dict[str, str]:
    """Return the environment of a fresh interpreter that sees what this one sees.

    This process's variables, and its ``sys.path`` as ``PYTHONPATH`` (a registry over chosen folders
    included)."""
    env = dict(os.environ)
    paths = [entry or os.getcwd() for entry in sys.path if isinstance(entry, str)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def probe_import(module: str, timeout: float = 60.0) -> ImportProbe:
    """Time importing ``module`` in a fresh interpreter and list the heavy modules it pulled in.

    On this ``sys.path``; accelctl's own import is excluded from the seconds."""
    env = fresh_interpreter_environment()
    script = _PROBE.format(heavy=HEAVY_MODULES)
    try:
        completed = subprocess.run(
            [sys.executable, "-c", script, module],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ImportProbe(seconds=timeout, error=f"importing took over {timeout:g} s")
    lines = completed.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = " ".join(completed.stderr.split())[-300:]
        return ImportProbe(error=f"the probe interpreter failed: {tail or 'no output'}")
    if "error" in data:
        missing = data.get("missing")
        unreachable = bool(missing) and (module == missing or module.startswith(f"{missing}."))
        return ImportProbe(error=str(data["error"]), unreachable=unreachable)
    return ImportProbe(seconds=float(data["seconds"]), heavy=tuple(data["heavy"]))

"""Measurements of the running process for the conformance checks: is torch imported, is CUDA
initialised, and what importing a plugin costs in a fresh interpreter.

None of these imports torch unless asked to (:func:`import_torch`): asking
``torch.cuda.is_initialized()`` in a process where torch is not imported yet would pay for the
import and prove nothing, since no CUDA context can exist without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

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
except BaseException as exc:
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    print(json.dumps({{"error": f"{{type(exc).__name__}}: {{exc}}", "missing": missing}}))
else:
    seconds = time.perf_counter() - start
    imported = sorted(name for name in heavy if name in sys.modules and name not in before)
    print(json.dumps({{"seconds": seconds, "heavy": imported}}))
"""


def torch_imported() -> bool:
    """True when torch is imported in this process."""
    return "torch" in sys.modules


def cuda_initialized() -> bool | None:
    """``torch.cuda.is_initialized()`` when torch is imported; None when it is not (so no CUDA
    context can exist through torch). Never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return bool(torch.cuda.is_initialized())


def import_torch() -> None:
    """Import torch now (so a timing that follows does not pay for it); a no-op when it is not
    installed."""
    try:
        import torch  # noqa: F401
    except ImportError:  # pragma: no cover - torch is a dependency of accelctl
        pass


@dataclass(frozen=True)
class ImportProbe:
    """What importing one module in a fresh interpreter did.

    ``error`` is set when the import failed there; ``unreachable`` when the module cannot be
    found by name at all (a module defined in a test file or ``__main__``), which says nothing
    about the plugin.
    """

    module: str
    seconds: float = 0.0
    heavy: tuple[str, ...] = ()
    error: str | None = None
    unreachable: bool = False


def probe_import(module: str, timeout: float = 60.0) -> ImportProbe:
    """Import ``module`` in a fresh interpreter on this process's ``sys.path`` and report its
    cost: the seconds it took (accelctl's own import excluded) and the heavy modules it pulled
    in."""
    env = dict(os.environ)
    paths = [entry or os.getcwd() for entry in sys.path if isinstance(entry, str)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
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
        return ImportProbe(module, seconds=timeout, error=f"importing took over {timeout:g} s")
    lines = completed.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = " ".join(completed.stderr.split())[-300:]
        return ImportProbe(module, error=f"the probe interpreter failed: {tail or 'no output'}")
    if "error" in data:
        missing = data.get("missing")
        unreachable = bool(missing) and (module == missing or module.startswith(f"{missing}."))
        return ImportProbe(module, error=str(data["error"]), unreachable=unreachable)
    return ImportProbe(module, seconds=float(data["seconds"]), heavy=tuple(data["heavy"]))

"""The contract's names whose code is a first-party distribution of its own (``accelctl-testing``,
``accelctl-integrations``), installed by an extra: each such name *is* that distribution's module
(one module under both names, so its classes and what a test patches are the same either way).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def companion(name: str, module: str, distribution: str, extra: str) -> ModuleType:
    """Import ``module`` and make it ``sys.modules[name]`` too, with the submodules it has
    imported.

    :raises ModuleNotFoundError: ``distribution`` is not installed (the message names the extra
        that installs it), or a module it imports is not (that module's own error).
    """
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.partition(".")[0]
        if exc.name not in (top, module):
            raise  # a dependency of the companion: its own message says what to install
        raise ModuleNotFoundError(
            f"{name} is in the {distribution} distribution, which is not installed: "
            f"pip install 'accelctl[{extra}]'",
            name=top,
        ) from exc
    # The package's submodules too (its __init__ imports them): `import accelctl.testing.checks`
    # must find the module that runs, not load a second copy under the other name.
    prefix = f"{module}."
    for loaded in [key for key in sys.modules if key.startswith(prefix)]:
        sys.modules[f"{name}.{loaded[len(prefix) :]}"] = sys.modules[loaded]
    sys.modules[name] = found
    return found

"""A bridge imported after a change to its framework in the same process, as another release.

A newer version number with the same internals, or one internal changed
(``accelctl.integrations._shared.versions``). Each bridge's tests write the framework's part of the
script; the accelerator it asks for and the runner are here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

#: A plugin whose devices are ``meta`` tensors: a device no framework knows, so a run the
#: framework's own choice places on the CPU shows.
META_ACCELERATOR = """
import accelctl


class Meta(accelctl.Accelerator):
    name = "metaacc"
    device_type = "meta"

    def detect(self):
        return True

    def auto_device_count(self):
        return 1

"""

#: A hang guard only: one import of torch and the framework (seconds, a minute when loaded).
HANG_GUARD_S = 300


def run_scenario(script: str, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter; the JSON document it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


#: Import a bridge after ``{change}`` to its framework; what refused it, where, and ``{probe}``.
REFUSED_IMPORT = """
import json, traceback, warnings
import accelctl
{imports}
{change}
where = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        from accelctl.integrations import {bridge}
        refused = None
    except accelctl.FrameworkVersionError as error:
        refused = str(error)
        where = traceback.extract_tb(error.__traceback__)[-1].filename
print(json.dumps({{
    "refused": refused,
    "raised_in": where,
    "probe": {probe},
    "warnings": [str(w.message) for w in caught if "accelctl" in str(w.message)],
}}))
"""


def refused_import(bridge: str, imports: str, change: str, probe: str = "None") -> dict[str, Any]:
    """Import a bridge in a fresh interpreter after ``imports`` and ``change``; say what happened.

    ``accelctl.integrations.<bridge>``; returns ``refused`` (the FrameworkVersionError's message, or
    None), ``raised_in`` (the file that raised it), ``probe`` (an expression's value after the
    import) and the accelctl warnings.
    """
    return run_scenario(
        REFUSED_IMPORT.format(bridge=bridge, imports=imports, change=change, probe=probe)
    )

"""Releases below a bridge's window are refused or adapted by shape checks, never by version alone.

Each release is installed with its dependencies (the ``*-below`` sessions of noxfile.py pass their
folders in ``ACCELCTL_BELOW_RELEASES``); importing the bridge on one runs the same shape checks as
on any release. What each release really gets is asserted here: refused, naming what is not there or
what its import raised, the window and the install line (:class:`accelctl.FrameworkVersionError`
from the bridge's import, before any process starts, never an error from inside the bridge), or
adapted with the one warning naming the untested release.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelctl.integrations._shared.versions import BY_MODULE

#: Each folder holds one release and its dependencies, named ``<name>-<version>``.
FOLDERS = [Path(p) for p in os.environ.get("ACCELCTL_BELOW_RELEASES", "").split(os.pathsep) if p]
FRAMEWORKS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
#: A hang guard only: one import of accelctl's bridge, its framework and torch.
HANG_GUARD_S = 300

#: What the bridge's checks find on each release: the start of the refusal after "cannot run
#: on <framework> <version>: ", or None where every name it uses is there (adapted, one warning).
EXPECTED: dict[tuple[str, str], str | None] = {
    # Crashed inside the bridge before (issue 46): AttributeError in prepare.
    ("accelerate", "1.0.0"): "accelerate.Accelerator.is_fsdp2 is not there",
    ("accelerate", "1.3.0"): "accelerate.Accelerator.is_fsdp2 is not there",
    # One minor below the floor: every name the bridge uses is there.
    ("accelerate", "1.12.0"): None,
    ("accelerate", "0.0.1"): (
        "accelerate.state.PartialState._prepare_backend is not there (no module accelerate.state)"
    ),
    ("transformers", "5.20.2"): None,
    ("transformers", "4.23.0"): "transformers.Trainer.accelerator.device is not there",
    # Crashed inside the bridge before (issue 46): ImportError in _refuse_unadapted_sharding.
    ("lightning", "2.2.5"): (
        "lightning.pytorch.strategies.ModelParallelStrategy._setup_distributed is not there "
        "(lightning.pytorch.strategies has no ModelParallelStrategy)"
    ),
    # Its dependencies' newest releases (pydantic 2) no longer import it.
    ("lightning", "1.8.0.post1"): (
        "importing it raised ImportError: cannot import name 'ModelMetaclass' from 'pydantic.main'"
    ),
    ("ray", "2.56.1"): None,
    # ray imports; ray.train does not on Python 3.11 (a dataclass with a mutable default).
    ("ray", "2.3.0"): (
        "ray.train.torch.config._TorchBackend.on_start cannot be imported (ray.train.torch.config "
        "raised ValueError: mutable default"
    ),
}

#: The module of each bridge's adaptation (importable without the framework).
ADAPTATIONS = {
    "lightning": "_lightning.adaptation",
    "accelerate": "_accelerate.state",
    "transformers": "_transformers.state",
    "ray": "_ray.adaptation",
}

pytestmark = pytest.mark.skipif(
    not FOLDERS, reason="no release below a window given (nox -t below installs them)"
)


def _release(folder: Path) -> tuple[str, str]:
    name, version = folder.name.split("-", 1)
    return name, version


def _import_bridge(folder: Path, framework: str) -> dict[str, object]:
    """Import ``framework``'s bridge in a fresh interpreter, ``folder``'s release first on the path.

    Returns its refusal (or None), where it was raised, and accelctl's warnings.
    """
    script = (
        "import json, traceback, warnings\n"
        "import accelctl\n"
        "raised_in = None\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    try:\n"
        f"        import accelctl.integrations.{framework}\n"
        "        refused = None\n"
        "    except accelctl.FrameworkVersionError as error:\n"
        "        refused = str(error)\n"
        "        raised_in = traceback.extract_tb(error.__traceback__)[-1].filename\n"
        "from importlib import metadata\n"
        "print(json.dumps({'refused': refused, 'raised_in': raised_in,\n"
        f"    'version': metadata.version({framework!r}),\n"
        "    'warnings': [str(w.message) for w in caught if 'accelctl' in str(w.message)]}))\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=environment,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_the_bridge_runs_its_shape_checks_on_a_release_below_its_window(folder: Path) -> None:
    framework, version = _release(folder)
    window = BY_MODULE[framework]
    major, minor = (int(part) for part in version.split(".")[:2])
    assert (major, minor) < window.oldest
    result = _import_bridge(folder, framework)
    assert result["version"] == version  # the release of the folder, not the session's
    expected = EXPECTED[framework, version]
    refused = result["refused"]
    install = (
        f"The bridge is tested with {window.text()}: pip install '{window.pinned()}' installs a "
        f"tested release (pip install 'accelctl[{framework}]' the newest)"
    )
    if expected is None:  # every name there: adapted, with the one warning, never refused
        assert refused is None
        assert result["warnings"] == [
            f"accelctl.integrations.{framework} is tested with {window.text()}, not {version}; "
            f"the {_uses(framework)} names it uses of {framework} are there as it expects, so it "
            f"adapts them. If a run misbehaves, install a tested release (pip install "
            f"'{window.pinned()}') and tell accelctl"
        ]
        return
    assert isinstance(refused, str), result
    assert refused.startswith(
        f"accelctl.integrations.{framework} cannot run on {framework} {version}: {expected}"
    ), refused
    assert refused.endswith(install), refused
    assert "\n" not in refused and "no longer" not in refused
    assert str(result["raised_in"]).endswith(
        os.path.join("_shared", "versions.py")
    )  # never from inside the bridge
    assert result["warnings"] == []
    if (framework, version) == ("accelerate", "1.3.0"):  # the page shows this one
        shown = FRAMEWORKS_PAGE.read_text().split("accelctl.FrameworkVersionError: ", 1)[1]
        shown = " ".join(shown.split("```", 1)[0].split())
        assert shown == refused


def _uses(framework: str) -> int:
    """How many names the bridge checks: its internals and its uses (the warning counts them)."""
    adaptation = importlib.import_module(f"accelctl.integrations.{ADAPTATIONS[framework]}")
    return len(adaptation.ADAPTATION.internals) + len(adaptation.ADAPTATION.uses)

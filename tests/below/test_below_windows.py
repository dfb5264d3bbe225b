"""Releases below a bridge's window, each installed alone (the ``*-below`` sessions of
noxfile.py pass their folders in ``ACCELCTL_BELOW_RELEASES``): importing the bridge on one is
:class:`accelctl.FrameworkVersionError`, naming the window and the install line, before any of
the framework is imported, let alone a process started; and the names the bridge checks are the
ones those releases lack (what crashed inside the bridges before, issue 46)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelctl.integrations._versions import BY_MODULE

#: Each folder holds one release: ``<folder>/<name>-<version>.dist-info``.
FOLDERS = [Path(p) for p in os.environ.get("ACCELCTL_BELOW_RELEASES", "").split(os.pathsep) if p]
FRAMEWORKS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
#: A hang guard only: one import of accelctl (a framework, for the shape checks).
HANG_GUARD_S = 300

#: The module of each bridge's adaptation (importable without the framework).
ADAPTATIONS = {
    "lightning": "_lightning_adaptation",
    "accelerate": "_accelerate_state",
    "transformers": "_transformers_state",
    "ray": "_ray_adaptation",
}

pytestmark = pytest.mark.skipif(
    not FOLDERS, reason="no release below a window given (nox -t below installs them)"
)


def _release(folder: Path) -> tuple[str, str]:
    (info,) = folder.glob("*.dist-info")
    name, version = info.name.removesuffix(".dist-info").split("-", 1)
    return name.lower(), version


def _import_bridge(folder: Path, framework: str, lowered: bool = False) -> dict[str, object]:
    """Import the bridge of ``framework`` with the release of ``folder`` first on the path (with
    the window's oldest lowered to 0.0: the shape checks alone decide)."""
    lower = ""
    if lowered:
        module = ADAPTATIONS[framework]
        lower = (
            f"from accelctl.integrations import {module} as state\n"
            "from accelctl.integrations._versions import Window\n"
            "newest = state.ADAPTATION.window.newest\n"
            f"state.ADAPTATION.window = Window({framework!r}, (0, 0), newest)\n"
        )
    script = (
        "import json, sys, traceback\n"
        "import accelctl\n" + lower + "try:\n"
        f"    import accelctl.integrations.{framework}\n"
        "    print(json.dumps({'refused': None}))\n"
        "except accelctl.FrameworkVersionError as error:\n"
        "    frames = traceback.extract_tb(error.__traceback__)\n"
        "    print(json.dumps({'refused': str(error), 'raised_in': frames[-1].filename,\n"
        f"        'imported': {framework!r} in sys.modules}}))\n"
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
def test_the_bridge_refuses_a_release_below_its_window_when_imported(folder: Path) -> None:
    framework, version = _release(folder)
    window = BY_MODULE[framework]
    major, minor = (int(part) for part in version.split(".")[:2])
    assert (major, minor) < window.oldest
    result = _import_bridge(folder, framework)
    refused = str(result["refused"])
    assert refused == (
        f"accelctl.integrations.{framework} cannot run on {framework} {version}: it is older than "
        f"the releases the bridge is tested with ({window.text()}), and nothing older was ever "
        f"run. pip install '{window.pinned()}' installs a tested release (pip install "
        f"'accelctl[{framework}]' the newest)"
    )
    assert result["imported"] is False  # refused before anything of the framework ran
    assert str(result["raised_in"]).endswith("_versions.py")  # never from inside the bridge
    if (framework, version) == ("accelerate", "1.3.0"):  # the page shows this one
        shown = FRAMEWORKS_PAGE.read_text().split("accelctl.FrameworkVersionError: ", 1)[1]
        shown = " ".join(shown.split("```", 1)[0].split())
        assert shown == refused


#: What the shape checks alone say of the releases that crashed inside the bridges (issue 46).
SHAPES = {
    ("accelerate", "1.0.0"): "accelerate.Accelerator.is_fsdp2 is not there",
    ("accelerate", "1.3.0"): "accelerate.Accelerator.is_fsdp2 is not there",
    (
        "lightning",
        "2.2.5",
    ): "lightning.pytorch.strategies.ModelParallelStrategy.reduce is not there",
}


@pytest.mark.parametrize(
    "folder", [f for f in FOLDERS if _release(f) in SHAPES], ids=lambda folder: folder.name
)
def test_the_names_the_bridge_checks_are_the_ones_the_release_lacks(folder: Path) -> None:
    framework, version = _release(folder)
    result = _import_bridge(folder, framework, lowered=True)
    refused = str(result["refused"])
    assert refused.startswith(
        f"accelctl.integrations.{framework} cannot run on {framework} {version}: "
        f"{SHAPES[framework, version]}"
    ), refused
    newest = BY_MODULE[framework].newest  # the window, its oldest lowered to 0.0
    assert f"The bridge is tested with {framework} 0.0 to {newest[0]}.{newest[1]}: " in refused
    assert f"pip install 'accelctl[{framework}]' the newest" in refused
    assert "no longer" not in refused
    assert str(result["raised_in"]).endswith("_versions.py")

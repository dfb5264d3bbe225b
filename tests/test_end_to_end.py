"""A new user's path in real processes: pip-install plugins (one broken), use the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.3.0"
dependencies = []

[project.entry-points."accelctl.accelerators"]
{name} = "{module}"
"""

#: The vendors' plugin modules, each written from the contract alone.
VENDORS = Path(__file__).resolve().parent / "fixtures" / "vendors"

#: Real pip installs into a folder of their own: minutes of the suite, none of the quick loop.
pytestmark = pytest.mark.slow


def make_package(root: Path, dist: str, name: str, module: str) -> Path:
    """A source package of ``dist`` whose entry point ``name`` is the vendor module ``module``."""
    package = root / dist
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT.format(dist=dist, name=name, module=module))
    shutil.copy(VENDORS / f"{module}.py", package / f"{module}.py")
    return package


def accelctl(target: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(target), **env}
    for var in ("ACCELCTL_ACCELERATOR", "ACCELCTL_PLUGINS", "ACCELCTL_DISABLE", "ACCELCTL_DEVICES"):
        environ.pop(var, None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "accelctl", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,  # a hang guard for one CLI call on a loaded machine, not a speed limit
    )


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packages")
    target = tmp_path_factory.mktemp("site")
    packages = [
        make_package(root, "accelctl-widget", "widget", "accelctl_widget"),
        make_package(root, "accelctl-flaky", "flaky", "accelctl_flaky"),
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            *map(str, packages),
        ],
        check=True,
        timeout=300,
    )
    return target


def test_installed_plugins_show_in_list(target: Path) -> None:
    result = accelctl(target, "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["widget"]["available"] is True and rows["widget"]["device_count"] == 3
    assert (rows["widget"]["distribution"], rows["widget"]["version"]) == (
        "accelctl-widget",
        "0.3.0",
    )
    assert "No module named 'widget_sdk_that_is_not_installed'" in rows["flaky"]["error"]
    assert rows["cpu"]["available"] is True  # the broken plugin takes nothing down


def test_auto_picks_the_vendor_plugin_and_warns_about_the_broken_one(target: Path) -> None:
    result = accelctl(target, "resolve", "--devices", "0,2", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["devices"] == ["cpu:0", "cpu:2"]
    assert "warning: skipping accelerator 'flaky' (accelctl-flaky 0.3.0)" in result.stderr


def test_disabling_the_broken_plugin_silences_it(target: Path) -> None:
    result = accelctl(target, "resolve", "--json", ACCELCTL_DISABLE="flaky")
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(result.stdout)["accelerator"] == "widget"


def test_errors_are_one_line_on_stderr(target: Path) -> None:
    result = accelctl(target, "resolve", "--accelerator", "flaky")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: accelerator 'flaky' (accelctl-flaky 0.3.0): importing")
    assert "Traceback" not in result.stderr


def test_list_imports_no_torch_and_a_lookup_imports_one_plugin(target: Path) -> None:
    probe = textwrap.dedent(
        """
        import sys
        import accelctl
        from accelctl.cli import _child, main
        _child.FORK = False  # the modules the plugins' asking imports, in this process
        sys.argv = ["accelctl"] + sys.argv[1:]
        try:
            main()
        except SystemExit:
            pass
        mods = sorted(m for m in sys.modules if m.startswith("accelctl_") or m == "torch")
        print("MODULES=" + ",".join(mods), file=sys.stderr)
        """
    )
    environ = {**os.environ, "PYTHONPATH": str(target)}

    def modules(*args: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            env=environ,
            timeout=600,  # a hang guard, not a speed limit
        ).stderr
        line = next(line for line in out.splitlines() if line.startswith("MODULES="))
        return [m for m in line.removeprefix("MODULES=").split(",") if m]

    listed = modules("list", "--json")
    assert "torch" not in listed, "accelctl list imported torch"
    assert {"accelctl_cpu", "accelctl_widget"} <= set(listed)
    assert modules("list", "--no-detect") == []
    assert modules("resolve", "--accelerator", "widget", "--json") == ["accelctl_widget", "torch"]

"""``accelctl new-plugin``: the package it writes installs, and validates as generated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cliharness import Cli

from accelctl._scaffold import PluginNames


@pytest.mark.slow
def test_generated_package_installs_and_passes_validate(cli: Cli, tmp_path: Path) -> None:
    # pip builds the package with this environment's setuptools (no network for an isolated
    # build); the dev extra should list it, since Python 3.12+ venvs come without it.
    pytest.importorskip("setuptools.build_meta", reason="building the package needs setuptools")
    result = cli("new-plugin", "my-chip", "--path", str(tmp_path))
    assert result.exit_code == 0, result.output
    root = tmp_path / "accelctl-my-chip"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "README.md",
        "pyproject.toml",
        "src/accelctl_my_chip/__init__.py",
        "src/accelctl_my_chip/py.typed",
        "tests/test_accelctl_my_chip_conformance.py",
    ]
    assert f"pip install -e {root}" in result.output
    assert 'my-chip = "accelctl_my_chip"' in (root / "pyproject.toml").read_text()

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(root)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("ACCELCTL_PLUGINS", None)
    env.pop("ACCELCTL_DISABLE", None)
    validate = subprocess.run(
        [sys.executable, "-c", "from accelctl.cli import main; main()", "validate", "my-chip",
         "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )  # fmt: skip
    assert validate.returncode == 0, validate.stdout + validate.stderr
    [report] = json.loads(validate.stdout)
    assert (report["name"], report["passed"]) == ("my-chip", True)
    assert (report["distribution"], report["version"]) == ("accelctl-my-chip", "0.1.0")
    statuses = {check["check"]: check["status"] for check in report["checks"]}
    assert statuses["import_is_light"] == statuses["bad_device_specs"] == "pass"
    assert statuses["environment_info"] == "pass"  # the generated hook is called and checked
    assert statuses["devices_auto"] == "skip"  # "not detected" until its author writes detect()

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout
    assert "12 passed, 5 skipped" in tests.stdout


def test_refuses_to_overwrite(cli: Cli, tmp_path: Path) -> None:
    existing = tmp_path / "accelctl-npu"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    result = cli("new-plugin", "npu", "--path", str(tmp_path))
    assert result.exit_code == 1
    assert f"error: {existing} exists already; nothing was written" in result.stderr
    assert [p.name for p in existing.iterdir()] == ["keep.txt"]


def test_refuses_an_installed_name(cli: Cli) -> None:
    result = cli("new-plugin", "cpu")
    assert result.exit_code == 1
    assert "an accelerator named 'cpu' is installed already (from accelctl-cpu)" in result.stderr


def test_bad_names_are_usage_errors_that_say_what_is_accepted(cli: Cli, tmp_path: Path) -> None:
    cases = {
        "NPU": "use lowercase letters, digits, '_' and '-', as in 'npu' or 'my-chip' (did you "
        "mean 'npu'?)",
        "gpu": "'gpu' is reserved (reserved: auto, gpu)",
        "accelctl-npu": "give the accelerator's own name ('npu')",
        "9chip": "'9chip' must start with a letter",
        "my chip": "'my chip' is not a valid accelerator name",
    }
    for name, message in cases.items():
        result = cli("new-plugin", name, "--path", str(tmp_path))
        assert result.exit_code == 2, name
        assert message in " ".join(result.stderr.split()), result.stderr
    assert list(tmp_path.iterdir()) == []


def test_names_derive_from_the_accelerator_name() -> None:
    names = PluginNames.for_name("my-chip")
    assert (names.distribution, names.module, names.device_type) == (
        "accelctl-my-chip",
        "accelctl_my_chip",
        "my_chip",
    )

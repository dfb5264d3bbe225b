"""``accelctl new-plugin``: the package it writes installs, and validates as generated."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cliharness import Cli

import accelctl
from accelctl.cli._scaffold import PluginNames, write

from fakedists import FakeSite


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
    assert f"pip install -e {shlex.quote(f'{root}[test]')}" in result.output
    assert 'my-chip = "accelctl_my_chip:MyChipAccelerator"' in (root / "pyproject.toml").read_text()

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
    assert "13 passed, 6 skipped" in tests.stdout


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
    assert (names.distribution, names.module, names.device_type, names.class_name) == (
        "accelctl-my-chip",
        "accelctl_my_chip",
        "my_chip",
        "MyChipAccelerator",
    )
    assert PluginNames.for_name("npu").class_name == "NPUAccelerator"  # short: an acronym


@pytest.fixture
def generate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Generate]:
    """Write a generated package into ``tmp_path`` and make its module importable.

    As an editable install would; the module is forgotten afterwards.
    """
    modules: list[str] = []

    def generate(name: str) -> Path:
        names = PluginNames.for_name(name)
        root, _ = write(names, tmp_path)
        monkeypatch.syspath_prepend(str(root / "src"))
        modules.append(names.module)
        return root

    yield generate
    for module in modules:
        sys.modules.pop(module, None)


Generate = Callable[[str], Path]


def entry_point(root: Path) -> tuple[str, str]:
    """The generated pyproject's one ``accelctl.accelerators`` entry point: (name, value)."""
    text = (root / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."accelctl.accelerators"]\n', 1)[1]
    [(name, value)] = re.findall(r'^([a-z0-9_-]+) = "([^"]+)"$', section.split("\n[", 1)[0], re.M)
    return name, value


@pytest.mark.parametrize("name", ["npu", "my-chip"])
def test_the_generated_plugin_reports_its_device_type(generate: Generate, name: str) -> None:
    # accelctl stats names devices "<device_type>:<i>" without torch: the chosen device type
    # must reach accelerator_info() ("my-chip" is no device type; "my_chip" is).
    root = generate(name)
    names = PluginNames.for_name(name)
    ep_name, value = entry_point(root)
    assert ep_name == name
    module, _, attribute = value.partition(":")
    plugin = importlib.import_module(module)  # what the entry point names, loaded as accelctl does
    if attribute:
        plugin = getattr(plugin, attribute)()
    handle = accelctl.AcceleratorHandle.from_object(plugin, name=name)
    assert handle.info.device_type == names.device_type
    assert handle.detect() is False and handle.auto_device_count() == 0
    assert "detect() is still the generated stub" in (handle.unavailable_reason() or "")


#: A path a generated file names: below src/ or tests/, or a file at the package's root.
_NAMED_PATH = re.compile(r"(?<![\w./-])((?:src|tests)(?:/[\w.-]+)*|[\w-]+\.(?:toml|md|txt|cfg))\b")


def test_every_file_the_package_names_exists(generate: Generate) -> None:
    root = generate("my-chip")
    named: dict[str, set[str]] = {}
    for path in root.rglob("*"):
        if path.is_file():
            for found in _NAMED_PATH.findall(path.read_text()):
                named.setdefault(found.rstrip("."), set()).add(str(path.relative_to(root)))
    missing = {name: sorted(by) for name, by in named.items() if not (root / name).exists()}
    assert missing == {}, f"named by the generated files but not generated: {missing}"
    # What the pyproject's and the README's own words name (so the scan above is not vacuous).
    assert {"tests/test_accelctl_my_chip_conformance.py", "README.md"} <= set(named)
    assert "src/accelctl_my_chip/__init__.py" in named


def test_stats_shows_the_generated_plugins_figures(
    cli: Cli, fake_site: FakeSite, generate: Generate
) -> None:
    generate("stats-chip")
    # The generated class as its author finishes it (fakeplugins.finished_chip).
    fake_site.install(
        "accelctl-stats-chip", {"stats-chip": "fakeplugins.finished_chip:ReadyAccelerator"}
    )
    result = cli("stats", "stats-chip", "--json")
    assert result.exit_code == 0, result.output
    [reading] = json.loads(result.stdout)
    assert (reading["accelerator"], reading["device"], reading["error"]) == (
        "stats-chip",
        "stats_chip:0",
        None,
    )
    assert reading["stats"] == {"memory_used_bytes": 1 << 30, "memory_total_bytes": 4 << 30}

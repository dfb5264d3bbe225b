"""The core's shape: a deliberate public surface, and a CLI start-up that loads only what it runs.

Sizes (lines, names, frames) are figures in docs/performance.md, never limits here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import accelctl
import accelctl._choice.selection

CORE = Path(accelctl.__file__).resolve().parent


def test_the_public_surface_is_what_users_and_plugin_authors_use() -> None:
    assert len(set(accelctl.__all__)) == len(accelctl.__all__)
    for name in accelctl.__all__:
        assert getattr(accelctl, name) is not None
    # The registry's internals are accelctl.testing's, for tests.
    for internal in ("Registry", "installed_plugins", "reset_registry", "PluginRecord"):
        assert internal not in accelctl.__all__
    assert {"Registry", "installed_plugins", "reset_registry"} <= set(dir(accelctl.testing))
    # A hook that failed at run time is not a plugin that failed to load.
    assert not issubclass(accelctl.PluginHookError, accelctl.PluginLoadError)


def test_list_imports_only_the_modules_it_runs() -> None:
    # `accelctl list` is the command people run first and most: selection, the device parsers
    # and torch are loaded on first use (accelctl.__getattr__), never by its start-up.
    code = (
        "import contextlib, io, json, sys\n"
        "from accelctl.cli.main import cli\n"
        "import accelctl.cli._child as child\n"
        "child.FORK = False  # what the command imports, the plugins' asking included\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    cli(['list', '--json'], prog_name='accelctl')\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    in_repo = "cpu,cuda,mps,xpu,privateuse1,hpu"  # whatever else this machine has installed
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "ACCELCTL_PLUGINS": in_repo}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )  # the timeout only guards against a hang
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "accelctl._host.registry" in loaded and "accelctl_cpu" in loaded  # it did list
    unused = {
        "accelctl._choice.selection",
        "accelctl._contract.device_specs",
        "accelctl._base.device_string",
        "torch",
    }
    unused |= {"accelctl._readings.stats"}  # `stats`' readings
    unused |= {"accelctl.testing", "accelctl.integrations"}  # the layers above the core
    unused |= {"accelctl.cli._contributed"}  # a built-in command never scans for added ones
    assert loaded & unused == set()
    # ...and each is there the moment it is asked for.
    assert accelctl.resolve is accelctl._choice.selection.resolve
    assert accelctl.split_device("cuda:1") == ("cuda", 1)


def test_the_conformance_kit_and_the_bridges_are_packages_of_the_core() -> None:
    import importlib

    import tomllib

    from accelctl.cli.main import COMMANDS

    # One distribution, `accelctl`: the kit and the bridges are its subpackages under the
    # contract's names, each module loaded once under its one name.
    assert Path(accelctl.testing.__file__).resolve() == CORE / "testing" / "__init__.py"
    assert sys.modules["accelctl.testing"] is accelctl.testing
    assert accelctl.testing.AcceleratorConformance.__module__ == "accelctl.testing.conformance"
    checks = importlib.import_module("accelctl.testing.checks")
    assert accelctl.testing.checks is checks
    assert accelctl.testing.ValidationReport is accelctl.testing.results.ValidationReport
    assert (CORE / "integrations" / "lightning.py").is_file()
    assert (CORE / "integrations" / "accelerate.py").is_file()
    # `accelctl validate` is the kit's command, `accelctl ray-resources` the Ray bridge's, added
    # through the CLI's entry-point group.
    assert "validate" not in COMMANDS and "ray-resources" not in COMMANDS
    project = tomllib.loads((CORE.parents[1] / "pyproject.toml").read_text())["project"]
    added = project["entry-points"]["accelctl.commands"]
    assert added == {
        "validate": "accelctl.testing.command:validate_command",
        "ray-resources": "accelctl.integrations._ray.resources:ray_resources_command",
    }


def test_what_trains_and_reports_needs_no_conformance_kit() -> None:
    # Every command but `validate`, and the Trainer, run without the conformance kit and the
    # bridges and never import them (tests/core/test_dependencies.py checks the imports' text;
    # this, what runs).
    code = (
        "import contextlib, io, json, sys\n"
        "sys.modules['accelctl.testing'] = None  # any import of the kit would fail\n"
        "sys.modules['accelctl.integrations'] = None  # and of the bridges\n"
        "from accelctl.cli.main import cli\n"
        "codes = {}\n"
        "for args in (['list', '--json'], ['stats', '--json'], ['env', '--json'],\n"
        "             ['resolve', '--accelerator', 'cpu', '--json']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            cli(args, prog_name='accelctl')\n"
        "        except SystemExit as exc:\n"
        "            codes[args[0]] = exc.code\n"
        "import accelctl\n"
        "trainer = accelctl.Trainer(accelerator='cpu', devices=1, max_epochs=1)\n"
        "kit = sorted(m for m, v in sys.modules.items()\n"
        "             if v is not None and m.startswith(('accelctl.testing',\n"
        "                                                'accelctl.integrations')))\n"
        "print(json.dumps({'codes': codes, 'kit': kit, 'device': str(trainer.device)}))\n"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "ACCELCTL_PLUGINS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )  # the timeout only guards against a hang
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "codes": {"list": 0, "stats": 0, "env": 0, "resolve": 0},
        "kit": [],
        "device": "cpu",
    }


def _sources() -> list[Path]:
    plugins = Path(__file__).resolve().parents[2] / "plugins"
    return sorted(CORE.rglob("*.py")) + sorted(plugins.glob("*/src/**/*.py"))


def test_no_module_reads_cpythons_private_state() -> None:
    """No module uses a standard-library module's private name (``os._exit`` is public).

    A private name (``sys._getframe``, ``atexit._run_exitfuncs``, ``importlib._bootstrap``'s
    lock tables) changes between releases and other interpreters lack it: accelctl uses the
    public ways (inspect, faulthandler, atexit.register).
    """
    import ast

    stdlib = sys.stdlib_module_names
    allowed = {"os._exit"}
    private = []
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in stdlib:
                    names.append(f"{node.value.id}.{node.attr}")
            elif isinstance(node, ast.Import):
                names += [a.name for a in node.names if a.name.split(".")[0] in stdlib]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module.split(".")[0] in stdlib:
                    names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                is_private = any(p.startswith("_") and not p.startswith("__") for p in parts)
                if is_private and name not in allowed:
                    private.append(f"{path.relative_to(path.parents[2])}:{node.lineno}: {name}")
    assert private == []


def test_only_the_fan_out_knows_the_deadline() -> None:
    # One guard, at the one place plugins are asked at once: no other module reads the hook
    # deadline (ACCELCTL_HOOK_TIMEOUT, defined in the settings) or has a plugin's late error.
    knowing = [
        str(path.relative_to(CORE))
        for path in sorted(CORE.rglob("*.py"))
        if "hook_timeout(" in path.read_text().replace("def hook_timeout(", "")
        or "timeout_error(" in path.read_text()
    ]
    assert knowing == ["_host/fanout.py"]

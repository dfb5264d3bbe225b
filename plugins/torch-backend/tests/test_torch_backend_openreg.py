"""The torch-backend plugin on a real out-of-tree backend: PyTorch's own torch_openreg.

The test process keeps torch's backend autoloading off (conftest.py), so these tests opt in
by running a fresh interpreter without ``TORCH_DEVICE_BACKEND_AUTOLOAD``: there ``import torch``
loads torch_openreg (the test sessions install 0.0.3), which renames PrivateUse1 to ``openreg``
with 2 emulated devices and its own distributed backend, ``occl``. The wheel is
../shared/backends/torch_openreg-0.0.3-*.whl; where it is not installed these tests skip, except
under CI=true, where a missing wheel is a failure. (The plugin on 0.0.1, a device without a
distributed backend: tests/openreg/test_openreg_no_backend.py.)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakedists import FakeSite

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

#: `import torch` with the backend takes seconds on a loaded machine; only a hang guard.
HANG_GUARD_S = 300


@pytest.fixture(autouse=True)
def _openreg_installed() -> None:
    if importlib.util.find_spec("torch_openreg") is None:
        message = (
            "torch_openreg is not installed: pip install "
            "../shared/backends/torch_openreg-0.0.3-cp311-cp311-linux_x86_64.whl "
            "(CPython 3.11, torch 2.13.0 only)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def with_backend(extra_path: list[str] | None = None, **variables: str) -> dict[str, str]:
    """This environment with torch's backend autoloading back on (and no ACCELCTL_* choice)."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if key == "ACCELCTL_HOOK_TIMEOUT"  # the tests' hang guard (conftest.py)
        or (key != "TORCH_DEVICE_BACKEND_AUTOLOAD" and not key.startswith("ACCELCTL_"))
    }
    if extra_path:
        environ["PYTHONPATH"] = os.pathsep.join(
            [*extra_path, *filter(None, [environ.get("PYTHONPATH")])]
        )
    environ.update(variables)
    return environ


def accelctl(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelctl", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=HANG_GUARD_S,
    )


#: Several ``accelctl`` commands in one fresh interpreter (torch and its backend imported once,
#: not once a command: seconds each), each through click's CliRunner on a fresh registry.
_EACH = """
import json, sys
from click.testing import CliRunner
import accelctl.testing
from accelctl.cli import cli
results = []
for args in json.loads(sys.argv[1]):
    accelctl.testing.reset_registry()
    result = CliRunner().invoke(cli, args)
    failure = result.exception
    said = "" if isinstance(failure, (SystemExit, type(None))) else repr(failure)
    results.append([result.exit_code, result.stdout, result.stderr + said])
print(json.dumps(results))
"""


def accelctl_each(
    *commands: tuple[str, ...], environ: dict[str, str]
) -> list[subprocess.CompletedProcess[str]]:
    """``accelctl`` with each of ``commands``, in order, in one fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _EACH, json.dumps([list(args) for args in commands])],
        capture_output=True,
        text=True,
        env=environ,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    return [
        subprocess.CompletedProcess(list(args), code, out, err)
        for args, (code, out, err) in zip(commands, json.loads(done.stdout), strict=True)
    ]


def python(code: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=HANG_GUARD_S,
    )


def test_list_shows_openreg_available_with_two_devices() -> None:
    result, table = accelctl_each(
        ("list", "--json"), ("list",), environ=with_backend(ACCELCTL_PLUGINS="cpu,privateuse1")
    )
    assert result.returncode == 0, result.stderr
    # One name per device (issue 46): the backend's; the plugin's own under "plugin".
    row = next(r for r in json.loads(result.stdout) if r["plugin"] == "privateuse1")
    assert row["name"] == "openreg"
    assert (row["available"], row["device_count"], row["state"]) == (True, 2, "available")
    assert row["aliases"] == ["openreg"]
    # The package that provides the backend, as installed.
    version = importlib.metadata.version("torch_openreg")
    assert row["description"] == f"PrivateUse1 backend 'openreg' (torch_openreg {version})"
    # The backend torch maps the device type to (Backend.default_device_backend_map).
    assert (row["priority"], row["family"], row["distributed_backend"]) == (50, None, "occl")
    line = next(line for line in table.stdout.splitlines() if line.startswith("openreg"))
    assert line.split()[:3] == ["openreg", "yes", "2"] and "'openreg'" in line
    assert "accelctl-torch-backend 0.1.0 (plugin privateuse1)" in line
    assert not any(row.startswith("privateuse1") for row in table.stdout.splitlines())


def test_validate_passes_with_the_device_checks_run() -> None:
    result, everything = accelctl_each(
        ("validate", "privateuse1", "openreg", "--json"),
        ("validate", "--json"),
        environ=with_backend(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    reports = json.loads(result.stdout)
    assert [report["name"] for report in reports] == ["privateuse1", "privateuse1"]
    checks = {c["check"]: c for c in reports[0]["checks"]}
    for check in ("devices_auto", "devices_minus_one", "devices_one", "device_stats"):
        assert checks[check]["status"] == "pass", checks[check]
    assert checks["devices_auto"]["detail"] == "'auto' -> [0, 1] -> [openreg:0, openreg:1]"
    assert everything.returncode == 0, everything.stdout  # and every other installed plugin


def test_resolve_by_the_backend_name_and_auto_prefers_it_over_the_cpu() -> None:
    environ = with_backend(ACCELCTL_PLUGINS="cpu,privateuse1")
    named, auto_run, two = accelctl_each(
        ("resolve", "--accelerator", "OpenReg", "--devices", "1,", "--json"),
        ("resolve", "--json"),
        ("resolve", "--accelerator", "openreg", "--devices", "2", "--json"),
        environ=environ,
    )
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["devices"] == ["openreg:1"]
    auto = json.loads(auto_run.stdout)
    # A distributed backend: "auto" is every visible device, one process each over occl.
    assert (auto["accelerator"], auto["devices"]) == ("openreg", ["openreg:0", "openreg:1"])
    assert auto["plugin"] == "privateuse1"
    assert auto["distributed_backend"] == "occl"
    assert json.loads(two.stdout)["distributed_backend"] == "occl", two.stderr
    # The error as a user sees it, from the console entry point in a process of its own.
    too_many = accelctl("resolve", "--accelerator", "openreg", "--devices", "3", environ=environ)
    assert too_many.returncode == 1
    assert "openreg: --devices 3 asks for 3 devices, more than are visible" in too_many.stderr


def test_trainer_on_openreg_matches_the_cpu_loss_and_logs_allocator_figures(
    tmp_path: Path,
) -> None:
    code = """
        import json, sys
        import torch
        import accelctl
        from torch import nn
        from torch.nn import functional as F
        from torch.utils.data import DataLoader, TensorDataset

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(8, 2)
            def forward(self, x):
                return self.linear(x)
            def training_step(self, batch, batch_idx):
                x, y = batch
                assert x.device.type == DEVICE_TYPE
                return F.cross_entropy(self(x), y)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.5)

        def fit(accelerator, root):
            global DEVICE_TYPE
            DEVICE_TYPE = "openreg" if accelerator == "openreg" else "cpu"
            torch.manual_seed(0)
            g = torch.Generator().manual_seed(0)
            x = torch.randn(128, 8, generator=g)
            data = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=32)
            # devices="auto", the default: 2 openreg devices, a process started alone (issue 26)
            trainer = accelctl.Trainer(
                accelerator=accelerator, max_epochs=2, root_dir=root, log_every_n_steps=2,
            )
            trainer.fit(Model(), data)
            lines = [json.loads(l) for l in open(root + "/metrics.jsonl")]
            stats = [l for l in lines if any(k.startswith("memory_") for k in l)]
            return {"name": trainer.accelerator.name, "plugin": trainer.accelerator.plugin_name,
                    "device": str(trainer.device),
                    "loss": trainer.metrics["train_loss"], "stats": stats[-1] if stats else None}

        print(json.dumps({"openreg": fit("openreg", sys.argv[1]), "cpu": fit("cpu", sys.argv[2])}))
    """
    (tmp_path / "openreg").mkdir()
    (tmp_path / "cpu").mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(code),
            str(tmp_path / "openreg"),
            str(tmp_path / "cpu"),
        ],
        capture_output=True,
        text=True,
        env=with_backend(),
        timeout=HANG_GUARD_S,
    )
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    # One name per device (issue 46): the backend's, the plugin's own name kept beside it.
    assert (runs["openreg"]["name"], runs["openreg"]["device"]) == ("openreg", "openreg:0")
    assert runs["openreg"]["plugin"] == "privateuse1"
    # One device of the two, and one warning saying how to use both, by the backend's name.
    assert result.stderr.count("2 openreg devices are visible, but this process was started") == 1
    assert "accelerator='openreg', devices='2'" in result.stderr  # `python -c`: no script
    assert "privateuse1" not in result.stderr
    assert runs["openreg"]["loss"] == pytest.approx(runs["cpu"]["loss"], rel=1e-5, abs=1e-6)
    # In use by the Trainer, so the allocator's figures are read (never initialised for it).
    assert runs["openreg"]["stats"]["memory_allocated_bytes"] > 0


def test_device_stats_reads_the_allocator_only_once_the_backend_is_in_use() -> None:
    code = """
        import json
        import torch
        import accelctl
        handle = accelctl.get_accelerator("openreg")
        before = handle.device_stats("openreg:1")
        initialised_by_stats = torch.openreg.is_initialized()
        x = torch.ones(1024, device="openreg:1")
        print(json.dumps({
            "before": before, "initialised_by_stats": initialised_by_stats,
            "str": handle.device_stats("openreg:1"),
            "device": handle.device_stats(torch.device("openreg", 1)),
            "other": handle.device_stats("openreg:0"),
        }))
    """
    result = python(code, with_backend())
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["before"] == {} and found["initialised_by_stats"] is False
    assert found["str"] == found["device"]
    assert found["str"]["memory_allocated_bytes"] == 4096
    assert found["str"]["memory_reserved_bytes"] >= 4096
    # torch.accelerator.memory_stats' counters, prefixed with the backend's name (issue 26).
    assert found["str"]["openreg.num_ooms"] == found["str"]["openreg.num_alloc_retries"] == 0
    assert found["other"]["memory_allocated_bytes"] == 0


def test_a_dedicated_plugin_wins_by_name_and_under_auto(fake_site: FakeSite) -> None:
    # Priority 10, below this plugin's 50: the dedicated plugin still wins.
    fake_site.install("accelctl-openreg", {"openreg": "fakeplugins.good:GoodAccelerator"})
    environ = with_backend(fake_site.path, ACCELCTL_PLUGINS="cpu,privateuse1,openreg")
    listed, by_name, by_auto, validated = accelctl_each(
        ("list", "--json"),
        ("resolve", "--accelerator", "openreg", "--json"),
        ("resolve", "--json"),
        ("validate", "privateuse1", "--json"),
        environ=environ,
    )
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["privateuse1"]["available"] is False
    assert rows["privateuse1"]["reason"] == (
        "the dedicated plugin accelctl-openreg provides 'openreg'"
    )
    assert rows["privateuse1"]["aliases"] == []  # the name is the dedicated plugin's
    for result in (by_name, by_auto):
        assert json.loads(result.stdout)["accelerator"] == "openreg", result.stderr
    assert validated.returncode == 0, validated.stdout


def test_autoload_off_but_the_backend_imported_by_hand_is_found() -> None:
    code = """
        import json, sys
        import torch_openreg  # what a script does where autoloading is off
        import accelctl
        handle = accelctl.get_accelerator("openreg")
        print(json.dumps([handle.name, handle.detect(), handle.auto_device_count()]))
    """
    result = python(code, with_backend(TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["openreg", True, 2]

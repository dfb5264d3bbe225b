"""``accelctl env`` through click's CliRunner: the bug-report block and its --json form."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from cliharness import Cli

import accelctl.testing

from fakedists import FakeSite


def test_json_report(cli: Cli, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,cuda,mps")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ACCELCTL_HOOK_TIMEOUT")  # the tests' hang guard: exactly these variables
    result = cli("env", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cuda"] == torch.version.cuda
    assert report["torch"]["mps_built"] is torch.backends.mps.is_built()
    assert report["python"].startswith(".".join(map(str, sys.version_info[:2])))
    rows = {row["name"]: row for row in report["accelerators"]}
    assert {"cpu", "cuda", "mps"} <= set(rows)
    others = set(rows) - {"cpu", "cuda", "mps"}  # other installed plugins, left out by the variable
    assert all(rows[name]["state"] == "disabled" for name in others)
    assert (rows["cpu"]["available"], rows["cpu"]["device_count"]) == (True, 1)
    assert rows["cpu"]["distribution"] == "accelctl-cpu" and rows["cpu"]["version"]
    assert rows["mps"]["reason"].startswith("not macOS")
    assert report["variables"] == {"ACCELCTL_PLUGINS": "cpu,cuda,mps"}  # accelctl's own
    assert rows["cuda"]["environment"]["CUDA_VISIBLE_DEVICES"] == "1,0"  # the plugin's
    assert rows["cpu"]["environment"] == {} and rows["cpu"]["environment_error"] is None


def test_human_block(cli: Cli, monkeypatch: pytest.MonkeyPatch, fake_site: FakeSite):
    fake_site.install("acme-broken", {"broken": "fakeplugins.lacks_runtime"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,mps,broken")
    result = cli("env")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == ["platform", "python", "torch", "accelctl"]
    assert lines[2].startswith(f"torch:     {torch.__version__} (CUDA: ")
    assert any(
        line.split() == ["cpu", "accelctl-cpu", "0.1.0:", "available,", "1", "device"]
        for line in lines
    )
    broken = next(line for line in lines if line.strip().startswith("broken"))
    assert "acme-broken 1.0: broken: " in broken and "vendor_runtime_that_is_missing" in broken
    assert "variables:" in lines and "  ACCELCTL_PLUGINS=cpu,mps,broken" in lines


def test_the_cuda_plugin_reports_drivers_and_variables(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """The CUDA plugin's environment_info (driver, amdgpu, CUDA variables) shows under its row.

    The core reads no driver.
    """
    import accelctl_cuda
    from accelctl_cuda import amd, nvml

    monkeypatch.delenv("ACCELCTL_HOOK_TIMEOUT")  # the tests' hang guard: exactly these variables
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(nvml, "ROOT", tmp_path)
    monkeypatch.setattr(amd, "ROOT", tmp_path)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidiactl").write_text("")
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.10.5\n")
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlSystemGetDriverVersion = lambda: b"570.86.15"  # type: ignore[attr-defined]
    fake.nvmlSystemGetCudaDriverVersion = lambda: 12080  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    for name in accelctl_cuda.DEVICE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cuda")
    report = json.loads(cli("env", "--json").stdout)
    [row] = [row for row in report["accelerators"] if row["name"] == "cuda"]
    assert row["environment"] == {
        "nvidia_driver": "570.86.15",
        "cuda_driver_api": "12.8",
        "amdgpu_driver": "6.10.5",
        "CUDA_VISIBLE_DEVICES": "1,0",
    }
    assert row["environment_error"] is None
    assert "drivers" not in report and report["variables"] == {"ACCELCTL_PLUGINS": "cuda"}
    lines = cli("env").stdout.splitlines()
    cuda = next(i for i, line in enumerate(lines) if line.strip().startswith("cuda "))
    assert lines[cuda + 1 : cuda + 5] == [
        "    nvidia_driver: 570.86.15",
        "    cuda_driver_api: 12.8",
        "    amdgpu_driver: 6.10.5",
        "    CUDA_VISIBLE_DEVICES: 1,0",
    ]


def test_no_variables_and_no_facts(cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("ACCELCTL_HOOK_TIMEOUT")  # the tests' hang guard (conftest.py)
    site = FakeSite(tmp_path)
    assert site.copy_installed("accelctl-cpu")  # the CPU plugin has no environment_info
    with accelctl.testing.installed_plugins(site.root):
        result = cli("env")
    assert result.stdout.endswith("\nvariables:\n  none set\n")
    assert not [line for line in result.stdout.splitlines() if line.startswith("    ")]  # no facts
    assert "drivers:" not in result.stdout


def test_a_plugins_facts_are_shown_under_its_row(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, fake_site: FakeSite
):
    fake_site.install("acme-chip", {"acme": "fakeplugins.facts:Facts"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "acme")
    report = json.loads(cli("env", "--json").stdout)
    [row] = [row for row in report["accelerators"] if row["name"] == "acme"]
    assert row["environment"] == {
        "acme_driver": "3.1",
        "cards": 2,
        "busy": 0.5,
        "ecc": True,
        "firmware": None,
    }
    result = cli("env")
    lines = result.stdout.splitlines()
    acme = next(i for i, line in enumerate(lines) if line.strip().startswith("acme "))
    assert "acme-chip 1.0: available, 2 devices" in lines[acme]
    assert lines[acme + 1 : acme + 6] == [
        "    acme_driver: 3.1",
        "    cards: 2",
        "    busy: 0.5",
        "    ecc: yes",
        "    firmware: unknown",
    ]
    assert not lines[acme + 6].startswith("    ")  # five facts, no more


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        ("FactsRaise", "raised RuntimeError: driver query failed"),
        ("FactsAreAList", "returned ['550.54'] (list); expected a flat dict"),
        ("FactIsAnObject", "expected str, int, float, bool or None values"),
        ("FactWithoutAName", "expected non-empty str keys"),
        ("FactIsNested", "'nested': {'a': 1} (dict)"),
        ("FactsExit", "raised SystemExit"),
    ],
    ids=["raises", "list", "object", "empty-key", "nested", "sys-exit"],
)
def test_a_broken_environment_info_is_that_rows_error_and_env_exits_0(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, fake_site: FakeSite, plugin: str, expected: str
):
    fake_site.install("acme-chip", {"acme": f"fakeplugins.facts:{plugin}"})
    fake_site.install("good-chip", {"good": "fakeplugins.facts:Facts"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "acme,good,cpu")
    result = cli("env", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["accelerators"]}
    assert rows["acme"]["environment"] == {}
    error = rows["acme"]["environment_error"]
    assert "acme-chip" in error and "environment_info()" in error and expected in error, error
    assert rows["acme"]["state"] == "available"  # the row itself is unharmed
    assert rows["good"]["environment"]["acme_driver"] == "3.1"  # nor are the others
    assert rows["good"]["environment_error"] is None
    text = cli("env")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    acme = next(i for i, line in enumerate(lines) if line.strip().startswith("acme "))
    assert lines[acme + 1].startswith("    environment_info() failed: ")
    assert expected in lines[acme + 1]


def test_broken_and_disabled_plugins_are_not_asked(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, fake_site: FakeSite
):
    fake_site.install("acme-chip", {"acme": "fakeplugins.facts:Facts"})
    monkeypatch.setenv("ACCELCTL_DISABLE", "acme")
    report = json.loads(cli("env", "--json").stdout)
    [row] = [row for row in report["accelerators"] if row["name"] == "acme"]
    assert (row["state"], row["environment"], row["environment_error"]) == ("disabled", {}, None)
    assert "fakeplugins.facts" not in sys.modules  # not imported, so not asked

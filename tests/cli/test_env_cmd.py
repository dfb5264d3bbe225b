"""``accelctl env`` through click's CliRunner: the bug-report block and its --json form."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from accelctl.cli import cli, env_cmd

from fakedists import FakeSite


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_json_report(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,cuda,mps")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ACCELCTL_HOOK_TIMEOUT")  # the tests' hang guard: exactly these variables
    result = run("env", "--json")
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
    assert report["variables"] == {
        "ACCELCTL_PLUGINS": "cpu,cuda,mps",
        "CUDA_VISIBLE_DEVICES": "1,0",
    }


def test_human_block(monkeypatch: pytest.MonkeyPatch, fake_site: FakeSite):
    fake_site.install("acme-broken", {"broken": "env_broken"}, {"env_broken": "import nope_y"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,mps,broken")
    result = run("env")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == ["platform", "python", "torch", "accelctl"]
    assert lines[2].startswith(f"torch:     {torch.__version__} (CUDA: ")
    assert any(
        line.split() == ["cpu", "accelctl-cpu", "0.1.0:", "available,", "1", "device"]
        for line in lines
    )
    broken = next(line for line in lines if line.strip().startswith("broken"))
    assert "acme-broken 1.0: broken: " in broken and "nope_y" in broken
    assert "variables:" in lines and "  ACCELCTL_PLUGINS=cpu,mps,broken" in lines


def test_nvidia_driver_is_read_through_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    (tmp_path / "nvidiactl").write_text("")
    monkeypatch.setattr(env_cmd, "NVIDIA_DRIVER_FILES", (str(tmp_path / "nvidiactl"),))
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlSystemGetDriverVersion = lambda: b"570.86.15"  # type: ignore[attr-defined]
    fake.nvmlSystemGetCudaDriverVersion = lambda: 12080  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu")
    report = json.loads(run("env", "--json").stdout)
    assert report["drivers"]["nvidia"] == "570.86.15 (CUDA 12.8)"
    assert "  nvidia: 570.86.15 (CUDA 12.8)" in run("env").stdout.splitlines()


def test_no_driver_no_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(env_cmd, "NVIDIA_DRIVER_FILES", (str(tmp_path / "absent"),))
    monkeypatch.setattr(env_cmd, "DEVICE_VARIABLES", ("ACCELCTL_TEST_UNSET_VARIABLE",))
    monkeypatch.setattr(sys, "platform", "linux")
    result = run("env")
    assert "drivers:\n  none found" in result.stdout or "amdgpu" in result.stdout
    assert "variables:\n  none set" in result.stdout

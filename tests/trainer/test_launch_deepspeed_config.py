"""``accelctl launch`` refuses a DeepSpeed config the device cannot run, before any process starts.

The config is named on the script's command line; the refusal is in the words the DeepSpeed bridge
uses in each process (accelctl._deepspeed.refusals). The device is a plugin's ``meta`` device
(fakeplugins.figures.SensorGpu): not the CPU, and without float64 values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import accelctl
from accelctl._launching.deepspeed_config import check_deepspeed_config
from accelctl.cli.main import cli

from fakedists import NORMS_IN_FLOAT64_UTILS, FakeSite, install_fake_deepspeed

OFFLOAD = {
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
}
#: The script writes this file first thing: a process started.
STARTED = "started.json"
SCRIPT = f"""
import json, pathlib, sys
pathlib.Path(sys.argv[1], {STARTED!r}).write_text(json.dumps(sys.argv[2:]))
"""


@pytest.fixture
def meta_gpu(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> FakeSite:
    """Install a plugin whose devices are ``meta:0`` and ``meta:1``; hide any C++ compiler.

    No compiler to build DeepSpeed's CPU ops with.
    """
    fake_site.install("accelctl-metagpu", {"metagpu": "fakeplugins.figures:SensorGpu"})
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    return fake_site


def launch(*args: str) -> Result:
    """``accelctl launch ARGS`` in this process."""
    return CliRunner().invoke(cli, ["launch", *args])


def write(folder: Path, name: str, config: dict[str, Any]) -> Path:
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def test_a_config_that_cannot_run_is_refused_before_any_process_starts(
    meta_gpu: FakeSite, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    offload = str(write(tmp_path, "offload.json", OFFLOAD))
    zero3 = write(tmp_path, "zero3.json", {"zero_optimization": {"stage": 3}})
    install_fake_deepspeed(meta_gpu, NORMS_IN_FLOAT64_UTILS, "0.16.9")  # norms in float64
    offloaded = "ZeRO-Offload (offload_optimizer: cpu)"
    runs = {
        ("--deepspeed_config", offload): ("--deepspeed_config", offload, offloaded),
        (f"--deepspeed_config={offload}",): ("--deepspeed_config", offload, offloaded),
        ("--deepspeed", offload): ("--deepspeed", offload, offloaded),
        ("--deepspeed_config_file", offload): ("--deepspeed_config_file", offload, offloaded),
        ("--deepspeed", str(zero3)): ("--deepspeed", str(zero3), "ZeRO stage 3"),
    }
    for args, (option, path, what) in runs.items():
        where = ("--accelerator", "metagpu", "--devices", "1", str(script), str(tmp_path))
        result = launch(*where, "--epochs", "1", *args)
        assert result.exit_code == 1, (args, result.output)
        line = result.output.strip()
        assert line.startswith(f"error: {what} on accelctl accelerator 'metagpu' (meta:0)"), line
        assert "\n" not in line
        assert line.endswith(
            f"(the DeepSpeed config {path}, from {option} on {script}'s command line; refused "
            "before any process started)"
        ), line
        assert not (tmp_path / STARTED).exists(), args
    # The ways out, named: the offload's, and the release to install for ZeRO-3.
    result = launch("--accelerator", "metagpu", str(script), str(tmp_path), "--deepspeed", offload)
    assert "no C++ compiler ('/nonexistent/c++', from $CXX or else 'c++') on PATH" in result.output
    assert '"torch_adam": true' in result.output
    assert '"zero_force_ds_cpu_optimizer": false' in result.output
    result = launch(
        "--accelerator",
        "metagpu",
        str(script),
        str(tmp_path),
        "--deepspeed_config_file",
        str(zero3),
    )
    assert "DeepSpeed 0.16.9 computes ZeRO-3's gradient norms in float64" in result.output
    assert "pip install 'deepspeed>=0.19.6', or use ZeRO stage 1 or 2" in result.output


def test_on_the_cpu_plugin_nothing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DeepSpeed's own CPU ops and float64 are there (the bridge checks nothing on the CPU either).
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    offload = str(write(tmp_path, "offload.json", OFFLOAD))
    zero3 = str(write(tmp_path, "zero3.json", {"zero_optimization": {"stage": 3}}))
    selection = accelctl.resolve("cpu", 2)
    for config in (offload, zero3):
        check_deepspeed_config("train.py", ["--deepspeed_config", config], selection)


def test_several_processes_without_a_backend_are_refused_first(
    fake_site: FakeSite, tmp_path: Path
) -> None:
    # Whatever the script's arguments: the launch's check of the processes, as for any script.
    fake_site.install(
        "accelctl-solo", {"solo": "fakeplugins.single_process:SingleProcessAccelerator"}
    )
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    config = str(write(tmp_path, "ok.json", {"zero_optimization": {"stage": 2}}))
    where = ("--accelerator", "solo", "--devices", "2", str(script), str(tmp_path))
    result = launch(*where, "--deepspeed_config", config)
    assert result.exit_code == 1
    assert "'solo' runs in a single process only (its distributed_backend is None)" in result.output
    assert not (tmp_path / STARTED).exists()


@pytest.mark.slow
def test_a_config_that_can_run_starts_the_script(meta_gpu: FakeSite, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    torch_adam = {**OFFLOAD, "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}
    config = str(write(tmp_path, "torch_adam.json", torch_adam))
    args = [str(tmp_path), "--deepspeed_config", config]
    result = launch("--accelerator", "metagpu", str(script), *args)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / STARTED).read_text()) == args[1:]

"""The bridge's ``deepspeed.initialize`` refuses what ``accelctl launch`` refuses, in its words.

Each process refuses what the launch refuses before the processes start, in the same words
(accelctl._deepspeed.refusals): the launch's line is the bridge's message and where the config came
from. On a ``meta`` device (not the CPU, no float64 values), in this process; and ``accelctl
launch`` on 2 openreg devices, as a user types it. Nothing trains.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
from openregmachine import UserMachine

import accelctl
from accelctl._deepspeed.refusals import norms_follow_device
from accelctl._launching.deepspeed_config import check_deepspeed_config

from fakedists import FakeSite

deepspeed = pytest.importorskip("deepspeed")
pytest.importorskip("accelctl.integrations.deepspeed")

OFFLOAD = {
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
}


def refused_at_launch(config: dict[str, object], folder: Path) -> str:
    path = folder / "ds.json"
    path.write_text(json.dumps(config))
    selection = accelctl.Selection(accelctl.get_accelerator("cpu"), [torch.device("meta:0")], 1)
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        check_deepspeed_config("train.py", ["--deepspeed_config", str(path)], selection)
    said = str(caught.value)
    where = f" (the DeepSpeed config {path}, from --deepspeed_config on train.py's command line"
    assert where in said
    return said.split(where)[0]


def test_the_bridge_refuses_in_each_process_what_launch_refuses_before(
    fake_site: FakeSite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelctl.integrations._deepspeed import accelerator as _deepspeed_accelerator
    from accelctl.integrations._deepspeed import initialize as _deepspeed_initialize

    monkeypatch.setenv("CXX", "/nonexistent/c++")
    # A release whose ZeRO-3 norms are float64 (no get_norm_dtype), 0.16.9 by its metadata.
    fake_site.install_raw("deepspeed", {}, version="0.16.9")
    monkeypatch.delattr(deepspeed.runtime.zero.utils, "get_norm_dtype", raising=False)
    on_meta = types.SimpleNamespace(
        handle=accelctl.get_accelerator("cpu"),
        process_device=torch.device("meta:0"),
        is_fp64_supported=lambda: _deepspeed_accelerator._dtype_supported("meta", "fp64"),
    )
    assert _deepspeed_initialize.wrap(on_meta)  # type: ignore[arg-type]
    try:
        model = torch.nn.Linear(4, 2)
        with pytest.raises(accelctl.ProcessSetupError) as offload:
            deepspeed.initialize(model=model, model_parameters=model.parameters(), config=OFFLOAD)
    finally:
        _deepspeed_initialize.restore()
    assert str(offload.value) == refused_at_launch(OFFLOAD, tmp_path)
    assert str(offload.value).startswith("ZeRO-Offload (offload_optimizer: cpu) on accelctl")
    zero3 = {"zero_optimization": {"stage": 3}}
    with pytest.raises(accelctl.ProcessSetupError) as norms:
        _deepspeed_initialize.refuse_float64_norms(on_meta, 3)  # type: ignore[arg-type]
    assert str(norms.value) == refused_at_launch(zero3, tmp_path)
    assert "DeepSpeed 0.16.9 computes ZeRO-3's gradient norms in float64" in str(norms.value)


@pytest.mark.openreg
@pytest.mark.slow
def test_launch_on_openreg_refuses_before_any_process_starts(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    # Under a release that computes ZeRO-3's norms in float64, ZeRO-3 (openreg's float64 abs is
    # missing: the launcher's own probe on the device says so); else the offload of AdamW, with
    # no C++ compiler to build CPUAdam.
    zero3 = not norms_follow_device()
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3}} if zero3 else OFFLOAD))
    script = tmp_path / "train.py"
    script.write_text("import pathlib, sys\npathlib.Path(sys.argv[1], 'started').touch()\n")
    done = occl_machine.accelctl(
        "launch", "--accelerator", "openreg", "--devices", "2", str(script), str(tmp_path),
        "--deepspeed_config", str(config), CXX="/nonexistent/c++",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert not (tmp_path / "started").exists()
    (line,) = done.stderr.strip().splitlines()
    what = "ZeRO stage 3" if zero3 else "ZeRO-Offload (offload_optimizer: cpu)"
    assert line.startswith(f"error: {what} on accelctl accelerator 'openreg' (openreg:0)"), line
    assert line.endswith(
        f"(the DeepSpeed config {config}, from --deepspeed_config on {script}'s command line; "
        "refused before any process started)"
    ), line

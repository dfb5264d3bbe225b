"""The DeepSpeed set-ups refused from a config alone (``accelctl._deepspeed_refusals``).

As ``accelctl launch`` reads them from a script's command line before any process starts, and as the
DeepSpeed bridge's ``deepspeed.initialize`` applies them in each process
(tests/deepspeed/test_deepspeed_refusals_shared.py). In-process: no DeepSpeed needed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from accelctl._deepspeed.refusals import (
    config_on_command_line,
    float64_norms_refusal,
    norms_follow_device,
    offload_refusal,
    runs_float64,
    zero_stage,
)

from fakedists import (
    NORMS_FOLLOW_DEVICE_UTILS,
    NORMS_IN_FLOAT64_UTILS,
    FakeSite,
    install_fake_deepspeed,
)

OFFLOAD = {
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
}


def test_each_conventional_option_names_the_config_and_nothing_else_does(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps(OFFLOAD))
    path = str(config)
    forms = {
        ("--deepspeed_config", path): "--deepspeed_config",  # DeepSpeed's add_config_arguments
        (f"--deepspeed_config={path}",): "--deepspeed_config",
        ("--deepspeed", path): "--deepspeed",  # transformers' TrainingArguments
        (f"--deepspeed={path}",): "--deepspeed",
        ("--deepspeed_config_file", path): "--deepspeed_config_file",  # Accelerate's
        ("--epochs", "3", "--deepspeed", "--deepspeed_config", path): "--deepspeed_config",
    }
    for args, option in forms.items():
        given = config_on_command_line(["--lr", "0.1", *args])
        assert given is not None, args
        assert (given.option, given.path, given.config) == (option, path, OFFLOAD), args
    not_json = tmp_path / "ds.yaml"
    not_json.write_text("zero_optimization: {stage: 3}\n")
    a_list = tmp_path / "list.json"
    a_list.write_text("[1, 2]")
    for args in (
        [],
        ["--epochs", "3"],
        ["--deepspeed"],  # DeepSpeed's flag alone
        ["--deepspeed", str(not_json)],  # not a .json path: not transformers' option
        ["--deepspeed_config", str(not_json)],  # not JSON: the script and DeepSpeed say so
        ["--deepspeed_config", str(tmp_path / "missing.json")],
        ["--deepspeed_config", str(a_list)],
        ["--deepspeed_config"],
        ["--", "--deepspeed_config", path],  # positional, after --
        ["--deepspeed_configs", path],
    ):
        assert config_on_command_line(args) is None, args


def test_offload_with_a_deepspeed_optimizer_is_refused_where_its_cpu_op_cannot_be_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    said = offload_refusal(OFFLOAD, "openreg", "openreg:0")
    assert said is not None and said.startswith(
        "ZeRO-Offload (offload_optimizer: cpu) on accelctl accelerator 'openreg' (openreg:0) with "
        '"optimizer": {"type": "AdamW"} steps with DeepSpeed\'s compiled op CPUAdam '
        "(CPUAdamBuilder), which DeepSpeed compiles on first use beside a plugin's device, and "
        "this machine has no C++ compiler ('/nonexistent/c++', from $CXX or else 'c++') on PATH"
    )
    assert '"zero_force_ds_cpu_optimizer": false' in said and '"torch_adam": true' in said
    lion: dict[str, Any] = {**OFFLOAD, "optimizer": {"type": "Lion"}}
    said = offload_refusal(lion, "openreg", "openreg:0")
    assert said is not None and "CPULion (CPULionBuilder)" in said and "torch_adam" not in said
    runs: list[dict[str, Any]] = [
        {**OFFLOAD, "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}},
        {**OFFLOAD, "optimizer": {"type": "SGD"}},  # no CPU op of DeepSpeed's
        {k: v for k, v in OFFLOAD.items() if k != "optimizer"},  # the script's optimizer
        {**OFFLOAD, "zero_optimization": {"stage": 2}},  # no offload
        {**OFFLOAD, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}},
    ]
    for config in runs:
        assert offload_refusal(config, "openreg", "openreg:0") is None, config


def _fake_deepspeed(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch, utils: str, version: str = "1.0"
) -> None:
    install_fake_deepspeed(fake_site, utils, version)
    for name in [name for name in sys.modules if name.partition(".")[0] == "deepspeed"]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(
    ("utils", "follows"),
    [
        (NORMS_FOLLOW_DEVICE_UTILS, True),  # 0.19.6 and later
        (NORMS_IN_FLOAT64_UTILS, False),  # before
        ("def get_norm_dtype(:\n", True),  # unreadable: nothing is refused on a guess
    ],
)
def test_the_norms_follow_the_device_where_deepspeed_has_get_norm_dtype(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch, utils: str, follows: bool
) -> None:
    _fake_deepspeed(fake_site, monkeypatch, utils)
    assert norms_follow_device() is follows
    assert "deepspeed" not in sys.modules  # read, not imported
    assert (zero_stage({"zero_optimization": {"stage": 3}}), zero_stage({})) == (3, None)


def test_zero3_is_refused_on_a_device_without_float64_under_an_older_release(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A release before get_norm_dtype; its version, for the message, from its metadata.
    _fake_deepspeed(fake_site, monkeypatch, NORMS_IN_FLOAT64_UTILS, "0.16.9")
    assert runs_float64("cpu") and not runs_float64("meta")  # meta tensors hold no values
    said = float64_norms_refusal(3, "openreg", "openreg:0", lambda: runs_float64("meta"))
    assert said == (
        "ZeRO stage 3 on accelctl accelerator 'openreg' (openreg:0): DeepSpeed 0.16.9 computes "
        "ZeRO-3's gradient norms in float64, which the device does not run (norm, abs, isinf on "
        "float64); DeepSpeed 0.19.6 and later keep them in float32 there. pip install "
        "'deepspeed>=0.19.6', or use ZeRO stage 1 or 2"
    )
    asked: list[str] = []

    def has_float64() -> bool:
        asked.append("probe")
        return True

    assert float64_norms_refusal(3, "openreg", "openreg:0", has_float64) is None
    assert float64_norms_refusal(2, "openreg", "openreg:0", lambda: False) is None
    assert asked == ["probe"]  # stage 2: the device is not asked

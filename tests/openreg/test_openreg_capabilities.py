"""The capability matrix on torch_openreg 0.0.2 and 0.0.3, served by the generic plugin.

A real out-of-tree device, served by the generic ``privateuse1`` plugin with its ``occl`` backend.
0.0.2 misses FSDP2's two needs, reported in the device's own words (no ``torch.openreg.Stream``;
storage that cannot resize), and its random draws do not restore; 0.0.3 has all three. One
``accelctl validate --capabilities openreg --json`` run per release and session, shared by the
assertions (``shared_run``: whichever pytest-xdist worker asks first makes it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from openregmachine import UserMachine, shared_run, succeeded

pytestmark = [pytest.mark.openreg, pytest.mark.slow]


def reported(machine: UserMachine, factory: pytest.TempPathFactory, name: str) -> dict[str, Any]:
    """The matrix's report for openreg (asked for by its alias) on ``machine``, once a session."""

    def probe(out: Path) -> None:
        command = ("validate", "--capabilities", "openreg", "--json")
        (out / "report.json").write_text(succeeded(machine.accelctl(*command)).stdout)

    folder = shared_run(factory, f"openreg-capabilities-{name}", probe)
    (report,) = json.loads((folder / "report.json").read_text())
    return dict(report)


@pytest.fixture(scope="module")
def openreg(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The suite's torch_openreg, 0.0.3."""
    return reported(occl_machine, tmp_path_factory, "fsdp")


@pytest.fixture(scope="module")
def with_gaps(
    fsdp_gaps_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """torch_openreg 0.0.2."""
    return reported(fsdp_gaps_machine, tmp_path_factory, "gaps")


def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in report["capabilities"]}


@pytest.mark.parametrize("release", ["openreg", "with_gaps"])
def test_openreg_is_probed_on_its_first_device_with_occl(
    release: str, request: pytest.FixtureRequest
) -> None:
    openreg = request.getfixturevalue(release)
    assert (openreg["name"], openreg["state"]) == ("privateuse1", "probed")
    assert (openreg["device"], openreg["distributed_backend"]) == ("openreg:0", "occl")
    # Missing capabilities are facts: the command passes.
    assert (openreg["passed"], openreg["problems"]) == (True, [])


def test_fsdp2s_first_gap_is_the_device_modules_streams(with_gaps: dict[str, Any]) -> None:
    streams = rows(with_gaps)["device-streams"]
    assert streams["supported"] is False
    assert streams["reason"].startswith("module 'torch_openreg.openreg' has no attribute 'Stream'")


def test_fsdp2s_second_gap_is_storage_resize(with_gaps: dict[str, Any]) -> None:
    resize = rows(with_gaps)["storage-resize"]
    assert resize["supported"] is False
    assert resize["reason"].startswith(
        "NotImplementedError: You should register `PrivateUse1HooksInterface`"
    )
    assert "implement `resizePrivateUse1Bytes`" in resize["reason"]


def test_fsdp2_lacks_those_two_only(with_gaps: dict[str, Any]) -> None:
    assert with_gaps["fsdp"] is False
    found = rows(with_gaps)
    needs = ("device-streams", "storage-resize", "all-gather-into-tensor", "reduce-scatter-tensor")
    assert [name for name in needs if not found[name]["supported"]] == [
        "device-streams",
        "storage-resize",
    ]


@pytest.mark.parametrize("release", ["openreg", "with_gaps"])
def test_the_rows_both_releases_have(release: str, request: pytest.FixtureRequest) -> None:
    found = rows(request.getfixturevalue(release))
    has = ["bf16-autocast", "fp16-autocast", "memory-stats", "ddp", "all-gather-into-tensor",
           "reduce-scatter-tensor", "broadcast", "all-reduce"]  # fmt: skip
    assert {name: found[name]["supported"] for name in has} == dict.fromkeys(has, True)
    assert (
        found["ddp"]["reason"] == "DistributedDataParallel ran a step on a 1-process 'occl' group"
    )
    # What ZeRO calls besides FSDP2's collectives, over occl; DeepSpeed's device ops: no build.
    assert found["all-reduce"]["reason"] == (
        "torch.distributed.all_reduce ran on a 1-process 'occl' group"
    )
    assert found["deepspeed-device-ops"]["supported"] is False
    assert (
        "none for 'openreg' (FusedAdam, FusedLamb, FusedLion"
        in (found["deepspeed-device-ops"]["reason"])
    )
    assert found["bf16-autocast"]["reason"].endswith("ran in torch.bfloat16")


def test_the_rows_0_0_2_lacks_besides_fsdp2s(with_gaps: dict[str, Any]) -> None:
    found = rows(with_gaps)
    # Its random numbers come from the CPU's generator, not the device's (whose state the
    # Trainer's checkpoints save beside the CPU's).
    assert found["rng-state"]["supported"] is False
    assert found["rng-state"]["reason"].endswith(
        "(the draw left that state as it was: it comes from elsewhere)"
    )
    # No inductor code generator: torch.compile only with backend="eager".
    assert found["compile"]["supported"] is False
    assert found["compile"]["reason"].startswith("eager fallback only:")


def test_0_0_3_has_what_fsdp2_needs_and_restores_its_random_draws(openreg: dict[str, Any]) -> None:
    found = rows(openreg)
    needs = ("device-streams", "storage-resize", "all-gather-into-tensor", "reduce-scatter-tensor")
    assert {name: found[name]["supported"] for name in needs} == dict.fromkeys(needs, True)
    assert openreg["fsdp"] is True
    assert found["rng-state"]["supported"] is True  # a restored state repeats a draw
    assert found["compile"]["supported"] is False  # still no inductor code generator


# -- the kernels row (issue 45): what each release lacks of the kernels common layers need ---------

CONVOLUTION = "aten::convolution"
ATTENTION = "aten::scaled_dot_product_attention"
#: Every case of a convolution: its forward and backward are missing in each release.
CONVOLUTIONS = ["conv1d", "conv2d", "conv3d", "conv_transpose2d", "conv2d-bf16"]
DECLARED = {
    "missing": [
        "aten::_scaled_dot_product_fused_attention_overrideable",
        "aten::_scaled_dot_product_fused_attention_overrideable_backward",
    ],
    "never_fall_back": [],
    "fallback_variable": None,
    "note": "torch_openreg's fused attention kernels are placeholders",
    "partial": ["aten::abs"],
}


def found_missing(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The kernels row's findings: (op, kernel, phase, state, fallback)."""
    kernels = rows(report)["kernels"]
    return [
        (m["op"], m["kernel"], m["phase"], m["state"], m["fallback"])
        for m in kernels["missing_kernels"]
    ]


@pytest.fixture(scope="module")
def without_backend(
    no_backend_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """torch_openreg 0.0.1."""
    return reported(no_backend_machine, tmp_path_factory, "no-backend")


@pytest.mark.parametrize("release", ["openreg", "with_gaps"])
def test_the_missing_convolution_and_attention_kernels_are_named(
    release: str, request: pytest.FixtureRequest
) -> None:
    """openreg lacks convolution and has a placeholder attention; the CPU fallback runs all four.

    0.0.3 and 0.0.2: no convolution (the overrideable operators' default kernels refuse the device),
    a placeholder attention forward (garbage) whose backward leaves no gradient; the fallback runs
    the attention because the plugin declares it a placeholder.
    """
    report = request.getfixturevalue(release)
    assert found_missing(report) == [
        (CONVOLUTION, "aten::convolution_overrideable", "forward", "missing", True),
        (CONVOLUTION, "aten::convolution_backward_overrideable", "backward", "missing", True),
        (ATTENTION, "aten::_scaled_dot_product_fused_attention_overrideable", "forward",
         "wrong-result", True),
        (ATTENTION, "aten::_scaled_dot_product_fused_attention_overrideable_backward",
         "backward", "missing", True),
    ]  # fmt: skip
    kernels = rows(report)["kernels"]
    assert kernels["supported"] is False
    first, backward, placeholder, no_gradient = kernels["missing_kernels"]
    assert first["cases"] == backward["cases"] == CONVOLUTIONS
    assert first["seen"].startswith("NotImplementedError: convolution_overrideable not implemented")
    assert placeholder["seen"].startswith("differs from the CPU's by")
    assert no_gradient["seen"] == "RuntimeError: tensor does not have a device"
    assert kernels["reason"] == (
        "missing or wrong on openreg:0: aten::convolution (forward, backward), "
        "aten::scaled_dot_product_attention (forward: wrong-result, backward); "
        "ACCELCTL_CPU_FALLBACK=1 runs all of them on the CPU"
    )
    assert kernels["kernel_gaps"] == DECLARED
    # Missing kernels are facts about the device: the command passes.
    assert report["passed"] is True


def test_0_0_1_lacks_more_an_autocast_rule_and_its_batch_norms_statistics(
    without_backend: dict[str, Any],
) -> None:
    """0.0.1's float32 autocast and stale batch-norm statistics are findings no fallback could run.

    Its autocast leaves a linear layer with a bias, and the attention, in float32 (the CPU's runs
    them in bfloat16), and its batch norm does not update the running statistics (fixed in 0.0.2).
    """
    found = found_missing(without_backend)
    assert found[:2] == [
        (CONVOLUTION, "aten::convolution_overrideable", "forward", "missing", True),
        (CONVOLUTION, "aten::convolution_backward_overrideable", "backward", "missing", True),
    ]
    assert ("aten::batch_norm", None, "forward", "wrong-result", False) in found
    assert ("aten::linear", None, "forward", "wrong-dtype", False) in found
    assert (ATTENTION, None, "forward", "wrong-dtype", False) in found
    kernels = rows(without_backend)["kernels"]
    entries = {(m["op"], m["state"]): m for m in kernels["missing_kernels"]}
    assert entries["aten::batch_norm", "wrong-result"]["seen"].startswith("result 1 differs")
    assert entries["aten::linear", "wrong-dtype"]["seen"] == (
        "result 1 is float32 where the CPU's is bfloat16"
    )
    assert entries["aten::linear", "wrong-dtype"]["why_no_fallback"].startswith(
        "the device's autocast does not cast it to bfloat16: an autocast rule"
    )


def test_what_the_row_says_the_fallback_runs_it_does(occl_machine: UserMachine) -> None:
    """With ACCELCTL_CPU_FALLBACK=1, every finding the row said the fallback covers is gone.

    The kernels probe runs in a process where the switch set the device up, as the Trainer does.
    What is left is what the missing convolution hid: 0.0.3's autocast does not cast a convolution
    to bfloat16.
    """
    found = occl_machine.python(
        """
        import json
        import torch
        import accelctl
        from accelctl._kernels.probe import probe_kernels
        from accelctl._kernels.setup import set_up_kernels

        handle = accelctl.get_accelerator("openreg")
        device = torch.device("openreg:0")
        handle.setup_device(device)
        setup = set_up_kernels(handle, device)
        probed = probe_kernels(device, setup.gaps)
        print(json.dumps([setup.fallback, [m.to_dict() for m in probed.missing]]))
        """,
        ACCELCTL_CPU_FALLBACK="1",
    )
    fallback, missing = found
    assert fallback == "accelctl"
    assert [(m["op"], m["phase"], m["state"], m["cases"]) for m in missing] == [
        (CONVOLUTION, "forward", "wrong-dtype", ["conv2d-bf16"])
    ]


def test_the_row_docs_missing_kernels_shows_is_the_row_printed(openreg: dict[str, Any]) -> None:
    """docs/missing-kernels.md quotes the kernels row's first line on 0.0.3: the report's."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "missing-kernels.md").read_text()
    quoted = re.search(r"```text\n(  no   kernels +)([^\n]*)\n```", page)
    assert quoted is not None, "the page no longer quotes the row"
    assert quoted.group(2) == rows(openreg)["kernels"]["reason"]

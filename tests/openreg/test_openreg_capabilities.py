"""issues 28 and 36: the capability matrix on a real out-of-tree device, torch_openreg served by
the generic ``privateuse1`` plugin with its ``occl`` backend, on two releases of the device. 0.0.2
misses FSDP2's two needs, reported in the device's own words (no ``torch.openreg.Stream``; storage
that cannot resize), and its random draws do not restore; 0.0.3 has all three. One ``accelctl
validate --capabilities openreg --json`` run per release and session, shared by the assertions
(``shared_run``: whichever pytest-xdist worker asks first makes it)."""

from __future__ import annotations

import json
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
           "reduce-scatter-tensor"]  # fmt: skip
    assert {name: found[name]["supported"] for name in has} == dict.fromkeys(has, True)
    assert (
        found["ddp"]["reason"] == "DistributedDataParallel ran a step on a 1-process 'occl' group"
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

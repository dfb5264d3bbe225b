"""Several processes on a device without a collective backend are refused before any trains.

A real one: torch_openreg 0.0.1 (first on the path of the processes started here, before the suite's
0.0.3), where torch maps no backend to openreg and the generic ``privateuse1`` plugin therefore has
none. accelctl's Trainer and ``accelctl launch`` each refuse, with accelctl's error (the bridges'
refusals on it: ``tests/lightning`` and ``tests/hf``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openregmachine import REFUSED, UserMachine, assert_single_process_refusal, shared_run

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

REFUSALS = (
    REFUSED
    + """
    auto = accelctl.resolve("openreg")
    result = {
        "version": __import__("importlib.metadata").metadata.version("torch_openreg"),
        "torch_backend": torch.distributed.Backend.default_device_backend_map.get("openreg"),
        "auto": [str(device) for device in auto.devices],
        "backend": auto.distributed_backend,
        "trainer": refused(lambda: accelctl.Trainer(accelerator="openreg", devices=2)),
    }
    print(json.dumps(result))
"""
)


@pytest.fixture(scope="module")
def refusals(
    no_backend_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    def run(out: Path) -> None:
        (out / "refusals.json").write_text(json.dumps(no_backend_machine.python(REFUSALS)))

    folder = shared_run(tmp_path_factory, "openreg-no-backend-refusals", run)
    result: dict[str, Any] = json.loads((folder / "refusals.json").read_text())
    return result


def test_the_processes_see_torch_openreg_without_a_backend(refusals: dict[str, Any]) -> None:
    assert refusals["version"] == "0.0.1"
    assert refusals["torch_backend"] is None
    assert refusals["backend"] is None
    assert refusals["auto"] == ["openreg:0"]  # "auto" never picks what cannot run


def test_two_processes_are_refused_when_the_trainer_is_made(refusals: dict[str, Any]) -> None:
    assert_single_process_refusal(refusals["trainer"])


def test_launch_refuses_two_devices(no_backend_machine: UserMachine, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    done = no_backend_machine.accelctl(
        "launch", "--accelerator", "openreg", "--devices", "2", str(script)
    )
    assert done.returncode == 1
    assert "runs in a single process only" in done.stderr
    assert "must not run" not in done.stderr

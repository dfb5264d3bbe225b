"""``accelctl.launch(function, ...)``: the notebook form, through torch's elastic launch API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import accelctl
from accelctl._contract.errors import LaunchError

sys.path.insert(0, str(Path(__file__).parent))
from launch_functions import where_am_i


def launch_in_fresh_interpreter(case: str, root: Path) -> dict[str, Any]:
    """Run a fork-based launch from a fresh interpreter, with ``root/tmp`` as its temporary folder.

    launch_functions.py says why a fresh interpreter.
    """
    script = Path(__file__).parent / "launch_functions.py"
    (root / "tmp").mkdir()
    done = subprocess.run(
        [sys.executable, str(script), case, str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(root / "tmp")},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_function_runs_once_per_device_and_returns_in_rank_order(tmp_path: Path) -> None:
    report = launch_in_fresh_interpreter("ranks", tmp_path)
    results = report["where"]
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world_size"] == 2 and r["tag"] == "x" for r in results)
    assert all(r["accelerator"] == "cpu" and r["devices"] == "2" for r in results)
    assert report["parent_pid"] not in {r["pid"] for r in results}
    assert report["devices_left_in_parent"] is None  # the parent's environment is restored
    # Nothing of the launch is left in the temporary folder (torch's compile cache may stay).
    left = [p.name for p in (tmp_path / "tmp").iterdir()]
    assert [name for name in left if not name.startswith("torchinductor_")] == []

    metrics = report["metrics"]
    assert metrics[0] == metrics[1]  # reduced across ranks
    assert metrics[0]["val_accuracy"] > 0.85


def test_one_device_runs_in_this_process() -> None:
    (result,) = accelctl.launch(where_am_i, "y", accelerator="cpu")
    assert result["pid"] == os.getpid()
    assert (result["rank"], result["world_size"], result["devices"]) == (0, 1, "1")
    assert "ACCELCTL_DEVICES" not in os.environ


@pytest.mark.slow
def test_a_failing_process_raises_with_its_traceback(tmp_path: Path) -> None:
    report = launch_in_fresh_interpreter("fail", tmp_path)
    message = report["message"]
    assert message.startswith("rank 1 of 2 failed (exit code 1): KeyError: 'rank one refuses'")
    assert "in fail_on_rank_one" in message  # the child's traceback, for a notebook to show
    assert report["rank"] == 1 and report["exit_code"] == 1


def test_several_processes_need_a_distributed_backend() -> None:
    class Solo(accelctl.Accelerator):
        name = "solo"
        device_type = "cpu"

        def detect(self) -> bool:
            return True

        def auto_device_count(self) -> int:
            return 2

    with pytest.raises(LaunchError, match="'solo' runs in a single process only"):
        accelctl.launch(where_am_i, "z", accelerator=Solo(), devices=2)

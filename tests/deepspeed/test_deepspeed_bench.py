"""``python -m bench --sections deepspeed`` runs quickly: bridge and DeepSpeed's own CPU, in turns.

A ZeRO-2 step through the bridge and on DeepSpeed's own CPU accelerator, taking turns in the same 2
processes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `bench` is a folder of the repository, not an installed package

from bench import deepspeed_overhead  # noqa: E402
from bench.machine import describe_machine  # noqa: E402
from bench.report import render  # noqa: E402


@pytest.mark.slow
def test_the_bench_times_the_bridge_against_deepspeeds_own_cpu_accelerator() -> None:
    section = deepspeed_overhead.run(repeats=2, quick=True)
    # Each engine ran with its own accelerator, over the one gloo group.
    assert section["accelerators"] == {
        "bridge": "PluginAccelerator",
        "deepspeed_cpu": "CPU_Accelerator",
    }
    assert (section["backend"], section["world_size"], section["steps_per_turn"]) == ("gloo", 2, 2)
    for figures in (section["times_s"], section["cpu_s"]):
        assert len(figures["bridge"]) == len(figures["deepspeed_cpu"]) == 2
        assert min(figures["bridge"] + figures["deepspeed_cpu"]) > 0
    for ratio in ("ratio_bridge", "cpu_ratio_bridge"):
        low, high = section[f"{ratio}_ci95"]
        assert 0 < low <= section[f"{ratio}_paired"] <= high
    table = render({"machine": describe_machine(), "sections": {"deepspeed": section}})
    assert "## DeepSpeed through the bridge (ZeRO-2)" in table

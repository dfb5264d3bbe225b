"""Accelerate's FSDP2 plugin through the bridge on torch_openreg, by what the device can do.

The cases are ``tests/openregfsdp.py``'s; and on CPU processes where openreg is loaded (torch's
current accelerator), Accelerate's FSDP2 run on the ``cpu`` plugin shards on a ``cpu`` mesh.
"""

from __future__ import annotations

from typing import Any

import pytest
from openregfsdp import attempted, check_refusal, openreg_equals_cpu, run_and_check
from openregmachine import UserMachine

pytestmark = [pytest.mark.openreg, pytest.mark.slow]


@pytest.fixture(scope="module")
def attempt(fsdp_gaps_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The bridge's sharded set-up on torch_openreg 0.0.2."""
    return attempted(fsdp_gaps_machine, tmp_path_factory, "accelerate")


def test_on_a_device_with_fsdp2_gaps_the_bridge_refuses_with_their_reasons_when_made(
    attempt: Any,
) -> None:
    check_refusal(
        attempt, "FullyShardedDataParallelPlugin(fsdp_version=2)", "without an fsdp_plugin"
    )


def test_fsdp2_on_the_cpu_plugin_shards_on_a_cpu_mesh_where_openreg_is_loaded(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # With openreg loaded, torch's current accelerator is openreg: Accelerate alone leaves
    # fully_shard to build its mesh there, and moving the CPU model onto it fails ("variable
    # and tensor have incompatible tensor type"). The bridge has Accelerate build it on "cpu".
    run_and_check(occl_machine, tmp_path_factory, "accelerate", "cpu")


def test_on_a_device_that_can_run_fsdp2_the_bridge_trains_sharded_on_it(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_and_check(occl_machine, tmp_path_factory, "accelerate", "openreg")


def test_its_weights_on_openreg_equal_its_weights_on_2_cpu_processes(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    openreg_equals_cpu(occl_machine, tmp_path_factory, "accelerate")

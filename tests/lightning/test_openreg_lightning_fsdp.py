"""Lightning's ``ModelParallelStrategy`` (FSDP2) through the bridge on torch_openreg.

By what the device can do (``tests/openregfsdp.py``).
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
    return attempted(fsdp_gaps_machine, tmp_path_factory, "lightning")


def test_on_a_device_with_fsdp2_gaps_the_bridge_refuses_with_their_reasons_when_made(
    attempt: Any,
) -> None:
    check_refusal(attempt, "Trainer(strategy=ModelParallelStrategy(...))", "strategy='ddp'")


def test_on_a_device_that_can_run_fsdp2_the_bridge_trains_sharded_on_it(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_and_check(occl_machine, tmp_path_factory, "lightning", "openreg")


def test_its_weights_on_openreg_equal_its_weights_on_2_cpu_processes(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    openreg_equals_cpu(occl_machine, tmp_path_factory, "lightning")

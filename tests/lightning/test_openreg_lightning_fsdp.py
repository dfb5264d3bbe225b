"""Lightning's ``ModelParallelStrategy`` (FSDP2) through the bridge on torch_openreg, by what the
device can do (``tests/openregfsdp.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from openregfsdp import attempted, check_refusal, run_and_check, skip_unless_fsdp2_runs
from openregmachine import UserMachine

pytestmark = [pytest.mark.openreg, pytest.mark.slow]


@pytest.fixture(scope="module")
def attempt(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return attempted(occl_machine, tmp_path_factory, "lightning")


def test_the_bridge_refuses_with_the_capabilities_reasons_when_it_is_made(attempt: Any) -> None:
    check_refusal(attempt, "Trainer(strategy=ModelParallelStrategy(...))", "strategy='ddp'")


def test_where_openreg_can_run_fsdp2_the_bridge_trains_sharded_on_it(
    attempt: Any, occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    skip_unless_fsdp2_runs(attempt)
    run_and_check(occl_machine, tmp_path_factory, "lightning", "openreg")

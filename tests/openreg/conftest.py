"""The openreg tests' processes see no cluster scheduler the machine may have.

Their machines and fixtures are ``tests/openregmachine.py``'s.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _scheduler_free(no_scheduler_on_path: None) -> None:
    """Hide any cluster scheduler the machine has from the processes started here.

    Lightning looks for SLURM's ``srun`` on ``PATH``.
    """

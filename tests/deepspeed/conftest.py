"""The DeepSpeed tests see no cluster scheduler the machine may have (``conftest.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _scheduler_free(no_scheduler_on_path: None) -> None:
    """Every test here runs with ``no_scheduler_on_path``."""

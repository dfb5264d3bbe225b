"""Read back what a multi-process run's driver script leaves per rank.

``<runs>/<run>/rank<r>.json`` and ``rank<r>.pt``, for the openreg tests that compare runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


def report(runs: Path, run: str, rank: int = 0) -> dict[str, Any]:
    """Rank ``rank``'s report of ``run``: what its driver wrote as JSON."""
    result: dict[str, Any] = json.loads((runs / run / f"rank{rank}.json").read_text())
    return result


def weights(runs: Path, run: str, rank: int = 0) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s final weights of ``run``."""
    result: dict[str, torch.Tensor] = torch.load(runs / run / f"rank{rank}.pt", weights_only=True)
    return result


def assert_equal(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    """The same tensors under the same names, bit for bit."""
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key

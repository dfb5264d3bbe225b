"""Accelerators written in the tests themselves (no entry point), shared by the bridges' tests.

Those of tests/integrations: Accelerate's and transformers'.
"""

from __future__ import annotations

from typing import Any

import accelctl

#: torchrun's variables for rank 0 of 2 on this machine (nothing rendezvous: refused before).
TWO_PROCESSES = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


class MetaAccelerator(accelctl.Accelerator):
    """Two devices of another type than the CPU, and no distributed backend."""

    name = "metaacc"
    device_type = "meta"

    def __init__(self, backend: str | None = None) -> None:
        self.distributed_backend = backend
        self.set_up: list[str] = []

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2

    def setup_device(self, device: Any) -> None:
        self.set_up.append(str(device))

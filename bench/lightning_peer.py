"""Lightning's own accelerator listing, the peer of ``accelctl list --json``.

Every registered accelerator with whether it is available and how many devices ``"auto"`` would use.

Run as a script (``python bench/lightning_peer.py``) where ``lightning`` (or the older
``pytorch_lightning``) is installed.
"""

from __future__ import annotations

import json
from typing import Any

try:
    from lightning.pytorch.accelerators import AcceleratorRegistry
except ImportError:  # the standalone distribution
    from pytorch_lightning.accelerators import AcceleratorRegistry  # type: ignore[no-redef, assignment, unused-ignore]


def main() -> None:
    """Print one JSON array: ``name``, ``available``, ``device_count`` per accelerator."""
    rows: list[dict[str, Any]] = []
    for name in sorted(AcceleratorRegistry.available_accelerators()):
        accelerator = AcceleratorRegistry[name]["accelerator"]
        try:
            available = bool(accelerator.is_available())
            count = int(accelerator.auto_device_count()) if available else 0
        except Exception as exc:  # an accelerator whose probe breaks is a row, as in accelctl
            rows.append({"name": name, "available": None, "error": repr(exc)})
            continue
        rows.append({"name": name, "available": available, "device_count": count})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

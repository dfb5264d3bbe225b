"""Starting one process per device: ``accelctl launch`` for scripts, :func:`launch` for functions.

Both resolve the selection once and hand it to every child (``ACCELCTL_ACCELERATOR``,
``ACCELCTL_DEVICES``); PyTorch's own launchers start them, and they die with their launcher. The
parts live in :mod:`accelctl._launching`. Run as ``python -m accelctl.launcher SCRIPT [ARGS ...]``
(in every child of ``accelctl launch``), it runs SCRIPT as ``__main__``, and first registers
the exit handler that ends the process before its teardown (:mod:`accelctl._launching.ending`).
"""

from __future__ import annotations

if __name__ == "__main__":  # before any import registers an exit handler: this one runs last
    from ._launching.ending import register_exit

    register_exit()

import sys

from ._launching.child import run_script
from ._launching.failures import LaunchFailedError, RankFailure
from ._launching.functions import launch
from ._launching.scripts import launch_script

__all__ = ["LaunchFailedError", "RankFailure", "launch", "launch_script"]

if __name__ == "__main__":
    run_script(sys.argv[1:])

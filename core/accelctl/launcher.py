"""Starting one process per device: ``accelctl launch`` for scripts, :func:`launch` for functions.

Both resolve the selection once, in the launching process, and hand it to every child through
``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES``, so that a ``Trainer()`` with default arguments
in a child runs on what the launcher chose; each child takes ``devices[LOCAL_RANK]``. Processes
are started by PyTorch's own launcher: torchrun for scripts, torch's elastic launch API for
functions. Every child dies with its launcher, and a signal to the launcher stops them all
(:mod:`accelctl._supervision`); when one fails, :class:`LaunchFailedError` names it.

This module is the public face; the parts live in :mod:`accelctl._launching`, one idea each.
Run as ``python -m accelctl.launcher SCRIPT [ARGS ...]`` (what ``accelctl launch`` starts in
every child), it runs SCRIPT as ``__main__`` (:func:`accelctl._launching.child.run_script`).
"""

from __future__ import annotations

import sys

from ._launching.child import run_script
from ._launching.failures import LaunchFailedError, RankFailure
from ._launching.functions import launch
from ._launching.scripts import launch_script

__all__ = ["LaunchFailedError", "RankFailure", "launch", "launch_script"]

if __name__ == "__main__":
    run_script(sys.argv[1:])

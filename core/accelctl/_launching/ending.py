"""How a launched process ends: after every exit handler, before the interpreter's teardown.

:func:`register_exit` runs first in ``python -m accelctl.launcher``, before any import that
registers an exit handler of its own (logging, torch, multiprocessing), so its handler is the
last to run. This module imports nothing that registers one
(docs/design/launched-process-exit.md).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

#: The exit status :func:`end_without_teardown` chose; None: the script ended otherwise.
_exit_code: int | None = None


def register_exit() -> None:
    """Register the exit handler that ends the process before its teardown.

    Registered before every other, it runs after them all (handlers run last registered first).
    """
    atexit.register(_exit_before_teardown)


def end_without_teardown(code: object) -> NoReturn:
    """End a launched process whose script finished; its teardown is then skipped.

    Raises :class:`SystemExit`: the interpreter waits for the script's threads and runs its exit
    handlers, the last of them the one :func:`register_exit` registered, which flushes the output
    and ends the process with ``os._exit`` before its objects are torn down.
    """
    global _exit_code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what sys.exit("message") prints
        code = 1
    _exit_code = code or 0
    raise SystemExit(_exit_code)


def _exit_before_teardown() -> None:
    """End the process with the status :func:`end_without_teardown` chose, if it chose one."""
    if _exit_code is None:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe
            stream.flush()
    os._exit(_exit_code)

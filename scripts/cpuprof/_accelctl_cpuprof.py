"""Log this process's CPU at exit (``scripts/cpuprof/run`` installs it with a ``.pth`` file).

Active only while the flag file names a log: one JSON line per Python process, with its parent,
its start and end, the test it inherited (``PYTEST_CURRENT_TEST``) and its CPU seconds.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

FLAG = "/tmp/accelctl_cpu_log_path"
LOG: str | None = None
if os.path.exists(FLAG):
    with open(FLAG) as flag:
        LOG = flag.read().strip() or None
#: Set by the pytest plugin in the xdist workers, whose CPU it logs test by test instead.
is_worker = False
_START = time.time()


def write(record: dict[str, object]) -> None:
    assert LOG is not None
    with open(LOG, "a") as log:
        log.write(json.dumps(record) + "\n")


def _at_exit() -> None:
    if is_worker:
        return
    times = os.times()
    test = (os.environ.get("PYTEST_CURRENT_TEST") or "").rsplit(" (", 1)[0]
    write(
        {
            "kind": "proc",
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "start": _START,
            "end": time.time(),
            "test": test,
            "argv": sys.argv[:4],
            "cpu": times.user + times.system,
        }
    )


if LOG:
    atexit.register(_at_exit)

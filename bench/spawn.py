"""Run one command and report its wall time and its own peak memory.

The middleman of every timed run: ``python -S -I bench/spawn.py REPORT COMMAND ...``.

Why a middleman: on Linux a child's ``ru_maxrss`` starts from its parent's resident size at
``fork``/``exec``, so a benchmark runner that has imported a lot would inflate every child's figure.
This script runs with ``-S -I`` (about 8 MiB, less than any Python child it starts), starts the
command with ``posix_spawn`` and reads the command's own ``ru_maxrss`` from ``wait4``. The clock
runs from just before the spawn to the reap, so the middleman's own start-up is not counted.

Writes ``{"seconds": ..., "max_rss_kib": ..., "status": ...}`` to REPORT and exits with the
command's status. Standard library only.
"""

import json
import os
import sys
import time


def main() -> int:
    """Spawn ``sys.argv[2:]``, wait for it, write the report to ``sys.argv[1]``."""
    report, command = sys.argv[1], sys.argv[2:]
    start = time.perf_counter()
    pid = os.posix_spawnp(command[0], command, os.environ)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    rss = usage.ru_maxrss // 1024 if sys.platform == "darwin" else usage.ru_maxrss
    with open(report, "w") as out:
        json.dump({"seconds": seconds, "max_rss_kib": rss, "status": code}, out)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())

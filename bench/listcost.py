"""Where ``accelctl list --json`` spends what it costs beyond its floor (issue 48, target <= 1.2x).

Commands, each a fresh process, interleaved (the order reversed every other round), each a step
more of what ``list --json`` does, so that the difference of two neighbours is one part's cost:

1. the floor (``bench/floor.py``): click, pluggy, one entry-point scan, a JSON line (and the
   same with the collector's objects frozen at exit, the base of 2);
2. ``list --no-detect --json``: accelctl's CLI and core imports and its scan, no plugin code
   (here and in 3 the collector's objects are frozen at exit, as 4 has them);
3. ``list --json`` in one process (the forked child off, ``_child.FORK = False``): every
   plugin imported and its ``detect`` run, in the fan-out's threads;
4. ``list --json`` as a user runs it: the same in a forked child, its rows over a pipe; since
   issue 48 ``accelctl.cli.main`` freezes the collector's objects after asking in a child;
5. ``list --json`` with that freeze undone (``gc.freeze`` replaced by a no-op): what the
   interpreter's shutdown collections cost, as before issue 48.

Each run gives its wall time and its CPU time (user + system, the forked child's included, from
``wait4``): on a machine shared with other work the CPU time moves far less than the wall time.
The ratios are taken pair by pair, each command's run against the floor's of the same round.

    python bench/listcost.py --repeats 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: `bench` importable, bench/ itself off the path
    _HERE = Path(__file__).resolve().parent
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]
    __package__ = "bench"

from . import commands
from .kernels import ratio_summary
from .measure import child_env

FLOOR, NO_DETECT = "floor (click + pluggy + scan)", "list --no-detect --json (frozen at exit)"
IN_PROCESS, LIST = "list --json, no child (FORK off, frozen at exit)", "list --json"
COLLECTED = "list --json, shutdown collections kept"
FLOOR_FROZEN = "floor, frozen at exit"
TARGET = 1.2

_MAIN = "from accelctl.cli import main; main()"
_FROZEN = "import atexit, gc; atexit.register(gc.freeze); "
_IN_PROCESS = _FROZEN + "import accelctl.cli._child as a; a.FORK = False; " + _MAIN
_COLLECTED = "import gc; gc.freeze = lambda: None; " + _MAIN


def _argvs() -> dict[str, list[str]]:
    python = sys.executable
    floor = list(commands.floor().argv)
    run_floor = f"import runpy; runpy.run_path({floor[1]!r}, run_name='__main__')"
    return {
        FLOOR: floor,
        FLOOR_FROZEN: [python, "-c", _FROZEN + run_floor, "list"],
        NO_DETECT: [python, "-c", _FROZEN + _MAIN, "list", "--no-detect", "--json"],
        IN_PROCESS: [python, "-c", _IN_PROCESS, "list", "--json"],
        LIST: [python, "-c", _MAIN, "list", "--json"],
        COLLECTED: [python, "-c", _COLLECTED, "list", "--json"],
    }


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run (stdout to /dev/null)."""
    started = time.perf_counter()
    out = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
    pid = os.posix_spawn(argv[0], argv, env, file_actions=out)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime


def run(repeats: int = 15, quick: bool = False) -> dict[str, Any]:
    """Time the commands ``repeats`` times, interleaved; the parts' costs and ratios to the floor.

    One untimed run each first, unless ``quick``; in wall and CPU time.
    """
    argvs, env = _argvs(), child_env()
    if not quick:
        for argv in argvs.values():
            _run(argv, env)
    wall: dict[str, list[float]] = {label: [] for label in argvs}
    cpu: dict[str, list[float]] = {label: [] for label in argvs}
    for index in range(repeats):
        order = list(argvs.items())
        for label, argv in order if index % 2 == 0 else order[::-1]:
            seconds, used = _run(argv, env)
            wall[label].append(seconds)
            cpu[label].append(used)

    def against(times: dict[str, list[float]], label: str, base: str = FLOOR) -> dict[str, Any]:
        return ratio_summary([a / b for a, b in zip(times[label], times[base], strict=True)])

    def part_ms(label: str, before: str) -> float:
        diffs = sorted(a - b for a, b in zip(cpu[label], cpu[before], strict=True))
        return round(1000 * diffs[len(diffs) // 2], 2)

    measured = (NO_DETECT, IN_PROCESS, LIST, COLLECTED)
    return {
        "repeats": repeats,
        "distributions": sum(1 for _ in metadata.distributions()),
        "median_ms": {label: round(1000 * statistics.median(v), 2) for label, v in wall.items()},
        "median_cpu_ms": {label: round(1000 * statistics.median(v), 2) for label, v in cpu.items()},
        "ratio_to_floor": {label: against(wall, label) for label in measured},
        "cpu_ratio_to_floor": {label: against(cpu, label) for label in measured},
        # Each part: the median of the pairs' differences of CPU time (ms) between neighbours.
        "parts_cpu_ms": {
            "accelctl's imports and CLI, beyond the floor (both frozen at exit)": part_ms(
                NO_DETECT, FLOOR_FROZEN
            ),
            "plugins imported and detect() run (threads)": part_ms(IN_PROCESS, NO_DETECT),
            "the forked child and its pipe": part_ms(LIST, IN_PROCESS),
            "the shutdown's collections, before issue 48": part_ms(COLLECTED, LIST),
        },
        "target": TARGET,
        "met": None if quick else against(wall, LIST)["median"] <= TARGET,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeats, args.quick), indent=1))


if __name__ == "__main__":
    main()

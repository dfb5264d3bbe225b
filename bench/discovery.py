"""Finding the installed plugins: accelctl's own scan against one through ``importlib.metadata``.

accelctl's scan of the distributions (``accelctl._host.discovery.scan``) reads each
``entry_points.txt`` itself and parses only those that declare its groups; the other
(:func:`importlib_scan`) uses ``importlib.metadata.distributions()`` and each distribution's
``entry_points``, parsed on its own so that one bad file breaks only itself, as accelctl's must.

Both scan the same search path, with ``count`` generated plugin distributions first on it
(``bench/fakeplugins.py``) and the environment's own after; both must find the same entry points
(checked before timing). They take turns, the order alternating, in this process (the scan is
what differs; the interpreter's start-up and imports are the same for both); medians.

The rule it decides: accelctl keeps its own scanner only where it is faster than importlib's by
more than 1.2x at 1000 plugins.

    python -m bench --sections discovery
    python -m bench.discovery --count 1000 --repeats 15
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from accelctl._host import discovery as _discovery
from accelctl._host.discovery import Found

from .fakeplugins import install_fake_plugins

#: Above this ratio (importlib's time over accelctl's, at 1000 plugins) the own scanner stays.
KEEP_ABOVE = 1.2


def importlib_scan(
    path: Sequence[str],
    groups: Sequence[str] = (_discovery.ENTRY_POINT_GROUP, _discovery.TORCH_BACKENDS_GROUP),
) -> Iterator[Found]:
    """Scan through ``importlib.metadata`` only, skipping alone a distribution it cannot parse.

    Each distribution once (the first on the path, as importlib's ``entry_points()`` keeps), its
    entry points parsed by importlib.
    """
    seen: set[str] = set()
    for dist in metadata.distributions(path=list(path)):
        key = _discovery.dist_key(dist)
        if key in seen:
            continue
        seen.add(key)
        try:
            entry_points = dist.entry_points
        except Exception:  # a malformed file: this distribution only
            continue
        for entry in entry_points:
            if entry.group in groups:
                yield Found(entry.group, entry.name, entry.value, dist)


def _found(entries: Iterator[Found]) -> list[tuple[str, str, str]]:
    return sorted((entry.group, entry.name, entry.value) for entry in entries)


def run(repeats: int = 15, quick: bool = False, count: int = 1000) -> dict[str, Any]:
    """Time both scans over ``count`` generated plugins and this environment's distributions."""
    count = 50 if quick else count
    repeats = 3 if quick else repeats
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as folder:
        site = Path(folder) / "site"
        install_fake_plugins(site, count)
        path = [str(site), *sys.path]
        scans = {
            "accelctl": lambda: _discovery.scan(path, warn=False),
            "importlib": lambda: importlib_scan(path),
        }
        found = {name: _found(scan()) for name, scan in scans.items()}
        if found["accelctl"] != found["importlib"]:
            raise RuntimeError("the two scans found different entry points")
        times: dict[str, list[float]] = {name: [] for name in scans}
        for repeat in range(repeats):
            order = list(scans) if repeat % 2 == 0 else list(reversed(scans))
            for name in order:
                started = time.perf_counter()
                for _ in scans[name]():
                    pass
                times[name].append(time.perf_counter() - started)
    distributions = sum(1 for _ in metadata.distributions(path=sys.path)) + count
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["importlib"] / medians["accelctl"]
    return {
        "plugins": count,
        "distributions": distributions,
        "entry_points": len(found["accelctl"]),
        "repeats": repeats,
        "quick": quick,
        "median_ms": {name: round(1000 * value, 2) for name, value in medians.items()},
        "ratio_importlib_accelctl": round(ratio, 3),
        "keep_own_scanner": ratio > KEEP_ABOVE,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.repeats, count=args.count)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ms = result["median_ms"]
    print(
        f"{result['plugins']} plugins ({result['distributions']} distributions): accelctl's scan "
        f"{ms['accelctl']} ms, importlib.metadata's {ms['importlib']} ms (medians of "
        f"{result['repeats']}); importlib / accelctl: {result['ratio_importlib_accelctl']}x"
    )


if __name__ == "__main__":
    main()

"""Asking many plugins at once: the fan-out's pool against one thread, in this process.

``Registry(path=...).listing()`` of ``count`` generated quick plugins (``bench/fakeplugins.py``),
which imports each once and then asks every one's ``detect`` in the fan-out, with the default
:class:`accelctl._host.fanout.Policy` (a pool of ``min(count, 4)`` threads) and with
``Policy(workers=1)`` (one thread: plugins asked one after the other, the least the fan-out can
cost). The two take turns, the order alternating, each turn ``listings`` listings of a fresh
registry; medians of the turns, and the ratio pool / one thread.

The pool's size was chosen against a pool that grew one thread at a time
(docs/design/fan-out-pool.md); that pool is ``_host/fanout.py`` at commit ada8484.

    python -m bench.fanout --count 12 --listings 200 --repeats 15
    python -m bench.fanout --count 1000 --listings 3 --repeats 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from accelctl._host import fanout
from accelctl.testing import Registry

from .fakeplugins import install_fake_plugins

POLICIES = {"pool": fanout.Policy(), "one thread": fanout.Policy(workers=1)}


def run(count: int = 12, listings: int = 200, repeats: int = 15) -> dict[str, Any]:
    """Time ``listings`` listings of ``count`` quick plugins under each policy, in turns."""
    times: dict[str, list[float]] = {name: [] for name in POLICIES}
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as folder:
        site = Path(folder)
        install_fake_plugins(site, count)
        sys.path.insert(0, str(site))  # the generated modules import from there
        previous = fanout.set_policy(fanout.Policy())
        try:
            for repeat in range(repeats):
                order = list(POLICIES) if repeat % 2 == 0 else list(reversed(POLICIES))
                for name in order:
                    fanout.set_policy(POLICIES[name])
                    started = time.perf_counter()
                    for _ in range(listings):
                        rows = Registry(path=[str(site)]).listing()
                    times[name].append(time.perf_counter() - started)
                    if len(rows) != count:
                        raise RuntimeError(f"listed {len(rows)} of {count} plugins")
        finally:
            fanout.set_policy(previous)
            sys.path.remove(str(site))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "plugins": count,
        "listings": listings,
        "repeats": repeats,
        "pool_threads": min(count, POLICIES["pool"].workers),
        "ms_per_listing": {
            name: round(1000 * value / listings, 3) for name, value in medians.items()
        },
        "ratio_pool_one_thread": round(medians["pool"] / medians["one thread"], 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=12, help="generated plugins (default 12)")
    parser.add_argument("--listings", type=int, default=200, help="listings per turn")
    parser.add_argument("--repeats", type=int, default=15, help="turns of each policy")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.count, args.listings, args.repeats)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ms = result["ms_per_listing"]
    print(
        f"{result['plugins']} plugins: pool of {result['pool_threads']} {ms['pool']} ms a "
        f"listing, one thread {ms['one thread']} ms (medians of {result['repeats']} turns of "
        f"{result['listings']}); pool / one thread: {result['ratio_pool_one_thread']}x"
    )


if __name__ == "__main__":
    main()

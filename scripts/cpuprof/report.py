"""Read ``scripts/cpuprof/run``'s log: CPU seconds by test file and by test."""

from __future__ import annotations

import collections
import json
import sys
from typing import Any


def main(path: str) -> None:
    records = [json.loads(line) for line in open(path)]
    tests = [r for r in records if r["kind"] == "inproc"]
    procs = [r for r in records if r["kind"] == "proc"]
    workers: dict[int, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for r in tests:
        workers[r["pid"]].append((r["start"], r["end"], r["test"]))
    parents = {r["pid"]: r["ppid"] for r in procs}

    def test_of(proc: dict[str, Any]) -> str:
        if proc["test"]:
            return str(proc["test"])
        pid = proc["ppid"]
        for _ in range(20):  # up the parents that logged, to an xdist worker
            if pid in workers:
                for start, end, test in workers[pid]:
                    if start - 1 <= proc["start"] <= end + 1:
                        return test
                return "?worker, between tests"
            if pid not in parents:
                break
            pid = parents[pid]
        return "?unattributed (scripts/test's own)"

    by_test: dict[str, float] = collections.defaultdict(float)
    by_file: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    for r in tests:
        by_test[r["test"]] += r["cpu"]
        by_file[r["test"].split("::")[0]] += r["cpu"]
    for r in procs:
        test = test_of(r)
        by_test[test] += r["cpu"]
        by_file[test.split("::")[0]] += r["cpu"]
        count[test.split("::")[0]] += 1
    inproc, sub = sum(r["cpu"] for r in tests), sum(r["cpu"] for r in procs)
    print(
        f"CPU {inproc + sub:.0f} s: in-process {inproc:.0f} s, {len(procs)} processes {sub:.0f} s"
    )
    print("\nby file (CPU s, processes):")
    for name, cpu in sorted(by_file.items(), key=lambda item: -item[1])[:40]:
        print(f"{cpu:7.1f} {count[name]:4d} {name}")
    print("\nby test:")
    for name, cpu in sorted(by_test.items(), key=lambda item: -item[1])[:40]:
        print(f"{cpu:7.1f} {name}")


if __name__ == "__main__":
    main(sys.argv[1])

"""``python -m bench``: run the benchmark suite, write the results file and the plot.

Run from the repository root with the environment where accelctl is installed::

    python -m bench                     # everything, ~5 minutes on 2 cores
    python -m bench --quick             # tiny sizes, one repeat: checks that it runs
    python -m bench --sections scaling --sizes 0,1000 --repeats 5
    python -m bench --sections faults   # launch's fault reports and checkpoint costs
    python -m bench --sections distributed   # Trainer and Accelerate on 2 openreg processes
    python -m bench --sections fsdp          # Trainer(strategy="fsdp") on 2 CPU processes
    python -m bench --sections fsdp-openreg  # ... and on 2 openreg devices
    python -m bench --sections discovery     # accelctl's scan against importlib.metadata's
    python -m bench --sections flops         # what counting the model's FLOPs costs a fit
    python -m bench --sections kernels       # the CPU fallback's cost, the error translation's
    python -m bench --sections peers --output bench/results/peers.json   # the same training
                                             # through every framework (nox -s bench)
    python -m bench --sections deepspeed     # a ZeRO-2 step through the DeepSpeed bridge
                                             # (accelctl[deepspeed] installed)

The Markdown tables of the run are printed at the end (``python -m bench.report FILE`` prints them
again from a results file).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import (
    deepspeed_overhead,
    discovery,
    dispatch,
    distributed_overhead,
    faults,
    flops_overhead,
    fsdp_overhead,
    kernels,
    peers,
    scaling,
    startup,
)
from .machine import describe_machine
from .plot import plot_scaling
from .report import render

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = (
    "startup", "scaling", "dispatch", "trainer", "faults", "distributed", "fsdp", "fsdp-openreg",
    "discovery", "flops", "kernels", "peers", "deepspeed",
)  # fmt: skip
#: ``python -m bench`` alone: every section but the two that need frameworks installed: ``peers``
#: (every framework together, half an hour; ``nox -s bench`` runs it; docs/performance.md) and
#: ``deepspeed`` (DeepSpeed; the deepspeed-newest test session runs it).
DEFAULT_SECTIONS = tuple(name for name in SECTIONS if name not in ("peers", "deepspeed"))
DEFAULT_REPEATS = 9
DEFAULT_OUTPUT = ROOT / "bench" / "results" / "latest.json"
DEFAULT_PLOT = ROOT / "docs" / "img" / "scaling.png"
#: Quick runs check that the suite works; they never overwrite the published figures.
QUICK_OUTPUT = ROOT / "bench" / "results" / "tmp" / "quick.json"
QUICK_PLOT = ROOT / "bench" / "results" / "tmp" / "quick.png"
#: The peers section's plot: beside the scaling plot (``--plot``), named ``peers.png``.
PEERS_PLOT = "peers.png"
SCHEMA = 1


def _sections(value: str) -> list[str]:
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in SECTIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {', '.join(unknown) or '(none given)'} in {value!r}; "
            f"choose from {','.join(SECTIONS)}"
        )
    return chosen


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(size < 0 for size in sizes):
        raise argparse.ArgumentTypeError(
            f"--sizes takes a comma list of plugin counts >= 0 such as 0,10,100,1000; got {value!r}"
        )
    return sorted(set(sizes))


def _repeats(value: str) -> int:
    try:
        repeats = int(value)
    except ValueError:
        repeats = 0
    if repeats < 1:
        raise argparse.ArgumentTypeError(f"--repeats takes an int >= 1; got {value!r}")
    return repeats


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, one repeat, no warm-up (checks that the suite runs)",
    )
    parser.add_argument(
        "--repeats",
        type=_repeats,
        default=None,
        help=f"timed runs per command (default {DEFAULT_REPEATS}; quick: 1)",
    )
    parser.add_argument(
        "--sections",
        type=_sections,
        default=list(DEFAULT_SECTIONS),
        help=f"comma list of sections, of {','.join(SECTIONS)} "
        "(default: all but peers and deepspeed)",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="extra plugin counts for scaling (default 0,10,100,1000; quick 0,3)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"results file (default {DEFAULT_OUTPUT.relative_to(ROOT)}; "
        f"quick: {QUICK_OUTPUT.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"PNG of the scaling section (default "
        f"{DEFAULT_PLOT.relative_to(ROOT)}; quick: {QUICK_PLOT.relative_to(ROOT)}); the peers "
        f"section's goes beside it, as {PEERS_PLOT}",
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else DEFAULT_REPEATS
    if args.output is None:
        args.output = QUICK_OUTPUT if args.quick else DEFAULT_OUTPUT
    if args.plot is None:
        args.plot = QUICK_PLOT if args.quick else DEFAULT_PLOT
    return args


def run_trainer(repeats: int, quick: bool) -> dict[str, Any]:
    """Section 4 through ``bench/trainer_overhead.py``."""
    from . import trainer_overhead

    return trainer_overhead.run(repeats=repeats, quick=quick)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen sections; write the results file and the plot; print the tables."""
    args = parse_args(argv)
    started = time.perf_counter()
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "startup": lambda: startup.run(args.repeats, args.quick),
        "scaling": lambda: scaling.run(args.repeats, args.quick, args.sizes),
        "dispatch": lambda: dispatch.run(args.repeats, args.quick),
        "trainer": lambda: run_trainer(args.repeats, args.quick),
        "faults": lambda: faults.run(args.repeats, args.quick),
        "distributed": lambda: distributed_overhead.run(args.repeats, args.quick),
        "fsdp": lambda: fsdp_overhead.run(args.repeats, args.quick),
        "fsdp-openreg": lambda: fsdp_overhead.run(args.repeats, args.quick, "openreg"),
        "discovery": lambda: discovery.run(args.repeats, args.quick),
        "flops": lambda: flops_overhead.run(args.repeats, args.quick),
        "kernels": lambda: kernels.run(args.repeats, args.quick),
        "peers": lambda: peers.run(args.repeats, args.quick),
        "deepspeed": lambda: deepspeed_overhead.run(args.repeats, args.quick),
    }
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)],
        "quick": args.quick,
        "repeats": args.repeats,
        "machine": describe_machine(),
        "sections": {},
    }
    failed = []
    for name in args.sections:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        section_start = time.perf_counter()
        try:
            results["sections"][name] = runners[name]()
        except Exception as exc:  # keep the other sections' figures; report and exit 1
            results["sections"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed.append(name)
        seconds = time.perf_counter() - section_start
        print(f"[bench] {name}: {seconds:.1f} s", file=sys.stderr, flush=True)
    if "scaling" in results["sections"] and "error" not in results["sections"]["scaling"]:
        why_not = plot_scaling(results["sections"]["scaling"], args.plot)
        results["plot"] = str(args.plot) if why_not is None else f"skipped: {why_not}"
    if "peers" in results["sections"] and "error" not in results["sections"]["peers"]:
        from .peers_report import plot_peers

        where = args.plot.with_name(PEERS_PLOT)
        why_not = plot_peers(results["sections"]["peers"], where)
        results["peers_plot"] = str(where) if why_not is None else f"skipped: {why_not}"
    results["duration_s"] = round(time.perf_counter() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(render(results), end="")
    print(
        f"\n[bench] results: {args.output}; plot: {results.get('plot', 'none')}; "
        f"{results['duration_s']} s",
        file=sys.stderr,
    )
    for name in failed:
        print(
            f"[bench] error: section {name} failed: {results['sections'][name]['error']}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Section 1, CLI start-up: ``accelctl``'s commands against bare Python, the floor and torch.

``accelctl list``, ``resolve``, ``stats`` and ``env`` against bare Python, the floor of a pluggy +
click CLI, ``import torch`` and (where installed) Lightning's own accelerator listing.

Targets, on a machine without a GPU: ``accelctl list`` imports no torch, costs at most 0.10x an
``import torch`` and at most 1.3x the floor; ``accelctl stats --json`` and ``accelctl env --json``
import no torch and peak at most 2x the resident memory of ``list``; ``env --json`` costs at most
0.12x an ``import torch``, and ``stats --json`` no more than ``list --json`` plus its documented
first-reading wait, 0.2 s.
"""

from __future__ import annotations

from typing import Any

from . import commands
from .measure import imported_modules, measure
from .targets import Target, ratio

LIST = "accelctl list --json"
LIST_NO_DETECT = "accelctl list --no-detect --json"
RESOLVE_CPU = "accelctl resolve --accelerator cpu --json"
STATS = "accelctl stats --json"
ENV = "accelctl env --json"
BARE = "python -c pass"
IMPORT_TORCH = 'python -c "import torch"'
FLOOR = "floor (click + pluggy + scan)"
LIGHTNING = "Lightning: list accelerators"


def run(repeats: int, quick: bool) -> dict[str, Any]:
    """Time the start-up commands, probe what ``accelctl`` imports, check the targets."""
    cmds = [
        commands.python_code(BARE, "pass"),
        commands.floor(),
        commands.accelctl(LIST, "list", "--json"),
        commands.accelctl(LIST_NO_DETECT, "list", "--no-detect", "--json"),
        commands.accelctl(RESOLVE_CPU, "resolve", "--accelerator", "cpu", "--json"),
        commands.accelctl(STATS, "stats", "--json"),
        commands.accelctl(ENV, "env", "--json"),
        commands.python_code(IMPORT_TORCH, "import torch"),
    ]
    # Lightning's import alone takes seconds: quick runs (which only check the suite works) skip it.
    peer = None if quick else commands.lightning_peer()
    if peer is not None:
        cmds.append(peer)
    timings = {t.label: t for t in measure(cmds, repeats, warmup=not quick, probe=quick)}
    median = {label: t.median_s for label, t in timings.items()}
    rss = {label: t.median_rss_mib for label, t in timings.items()}

    plugins = commands.plugin_modules()
    imports: dict[str, dict[str, Any]] = {}
    for command in cmds:
        if command.label.startswith("accelctl"):
            modules = imported_modules(command, timings[command.label])
            imports[command.label] = {
                "torch": "torch" in modules,
                "plugins": sorted(name for module, name in plugins.items() if module in modules),
            }

    torch_s, floor_s, list_s = median[IMPORT_TORCH], median[FLOOR], median[LIST]
    ratios = {
        "list / import torch": ratio(list_s, torch_s),
        "list / floor": ratio(list_s, floor_s),
        "list / bare python": ratio(list_s, median[BARE]),
        "list --no-detect / floor": ratio(median[LIST_NO_DETECT], floor_s),
        "resolve cpu / import torch": ratio(median[RESOLVE_CPU], torch_s),
        "stats / import torch": ratio(median[STATS], torch_s),
        "env / import torch": ratio(median[ENV], torch_s),
        "stats / list": ratio(median[STATS], list_s),
        "env / list": ratio(median[ENV], list_s),
        "stats peak RSS / list": ratio(rss[STATS], rss[LIST]),
        "env peak RSS / list": ratio(rss[ENV], rss[LIST]),
    }
    if peer is not None:
        ratios["Lightning listing / accelctl list"] = ratio(median[LIGHTNING], list_s)
    from accelctl._readings.stats import FIRST_READING_WAIT_S

    over_wait = median[STATS] - FIRST_READING_WAIT_S
    ratios["(stats - its 0.2 s wait) / list"] = ratio(over_wait, list_s)
    targets = [
        Target("accelctl list imports torch (0 = no)", float(imports[LIST]["torch"]), 0, "bool"),
        Target("accelctl list / import torch <= 0.10", ratios["list / import torch"], 0.10),
        Target("accelctl list / floor <= 1.3", ratios["list / floor"], 1.3),
        Target("accelctl env --json / import torch <= 0.12", ratios["env / import torch"], 0.12),
        Target(
            "accelctl stats --json <= list --json + its 0.2 s wait",
            ratios["(stats - its 0.2 s wait) / list"],
            1.0,
        ),
    ]
    for label, short in ((STATS, "stats"), (ENV, "env")):
        targets += [
            Target(f"{label} imports torch (0 = no)", float(imports[label]["torch"]), 0, "bool"),
            Target(f"{label} peak RSS / list <= 2", ratios[f"{short} peak RSS / list"], 2.0),
        ]
    return {
        "commands": [t.to_dict() for t in timings.values()],
        "imports": imports,
        "ratios": ratios,
        "targets": [t.to_dict() for t in targets],
        "lightning": peer is not None,
    }

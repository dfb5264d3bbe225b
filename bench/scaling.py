"""Section 2, scaling: the CLI and a library lookup with 0, 10, 100, 1000 extra plugins installed.

The extra distributions lie in a temporary folder put in front of ``PYTHONPATH``.

Per size: the time of ``list --json`` (imports and runs every plugin), ``list --no-detect``
(package metadata only), a named lookup through the CLI (``resolve --accelerator cpu``, which also
builds the ``torch.device``) and through the library (``accelctl.get_accelerator("cpu")``, no
torch), and ``resolve`` with ``"auto"`` (loads every plugin); and how many plugins each imported.

Targets: a named lookup imports exactly one plugin, and with 1000 extra plugins costs at
most 1.3x what it costs with none; ``list`` of 1000 plugins costs at most half an ``import torch``.
"""

from __future__ import annotations

import compileall
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import commands
from .fakeplugins import PREFIX, install_fake_plugins
from .measure import Command, Timing, imported_modules, measure
from .targets import Target, ratio

SIZES = (0, 10, 100, 1000)
QUICK_SIZES = (0, 3)

LIST = "list --json"
LIST_NO_DETECT = "list --no-detect --json"
NAMED_CLI = "resolve --accelerator cpu --json"
NAMED_LIB = 'get_accelerator("cpu")'
RESOLVE_AUTO = "resolve --json (auto)"
IMPORT_TORCH = 'python -c "import torch"'
#: The named lookups, held to "imports one plugin" and "1.3x with the most plugins".
NAMED = (NAMED_CLI, NAMED_LIB)


def _commands(site: Path) -> list[Command]:
    env = commands.pythonpath(str(site))
    return [
        commands.accelctl(LIST, "list", "--json", env=env),
        commands.accelctl(LIST_NO_DETECT, "list", "--no-detect", "--json", env=env),
        commands.accelctl(NAMED_CLI, "resolve", "--accelerator", "cpu", "--json", env=env),
        commands.python_code(
            NAMED_LIB, "import accelctl; accelctl.get_accelerator('cpu').detect()", env=env
        ),
        commands.accelctl(RESOLVE_AUTO, "resolve", "--json", env=env),
    ]


def run(
    repeats: int, quick: bool, sizes: Sequence[int] | None = None, workdir: Path | None = None
) -> dict[str, Any]:
    """Time the commands at each size, count the plugins each one imports, check the targets.

    :param sizes: extra plugin counts (default :data:`SIZES`, or :data:`QUICK_SIZES` when quick).
    :param workdir: where the generated distributions go (default: a temporary folder, removed).
    """
    sizes = sorted(set(sizes if sizes is not None else (QUICK_SIZES if quick else SIZES)))
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-", dir=workdir) as tmp:
        return _run(repeats, quick, sizes, Path(tmp))


def _run(repeats: int, quick: bool, sizes: list[int], tmp: Path) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    baseline: Timing | None = None
    for size in sizes:
        site = tmp / f"plugins-{size}"
        install_fake_plugins(site, size)
        # pip compiles a package's modules at install time; so does this "install".
        compileall.compile_dir(str(site), quiet=1)
        cmds = _commands(site)
        if size == sizes[-1]:
            # The baseline of the list target, interleaved with the runs it is compared to.
            torch_command = commands.python_code(IMPORT_TORCH, "import torch")
            *timings, baseline = measure(
                [*cmds, torch_command], repeats, warmup=not quick, probe=quick
            )
        else:
            timings = measure(cmds, repeats, warmup=not quick, probe=quick)
        plugins = commands.plugin_modules([str(site)])
        for command, timing in zip(cmds, timings, strict=True):
            modules = imported_modules(command, timing)
            loaded = [name for module, name in plugins.items() if module in modules]
            rows.append(
                {
                    "extra_plugins": size,
                    "command": command.label,
                    **_timing_fields(timing),
                    "plugins_imported": len(loaded),
                    "generated_plugins_imported": sum(n.startswith(PREFIX) for n in loaded),
                    "torch_imported": "torch" in modules,
                }
            )
    assert baseline is not None
    return {
        "sizes": sizes,
        "import_torch": baseline.to_dict(),
        "rows": rows,
        "targets": [t.to_dict() for t in _targets(rows, sizes, baseline.median_s)],
    }


def _timing_fields(timing: Timing) -> dict[str, Any]:
    data = timing.to_dict()
    return {key: data[key] for key in ("median_ms", "median_max_rss_mib", "runs_ms")}


def _targets(rows: list[dict[str, Any]], sizes: list[int], torch_s: float) -> list[Target]:
    def row(size: int, command: str) -> dict[str, Any]:
        return next(r for r in rows if r["extra_plugins"] == size and r["command"] == command)

    low, high = sizes[0], sizes[-1]
    targets = []
    for command in NAMED:
        counts = {row(size, command)["plugins_imported"] for size in sizes}
        # One figure for all sizes: the count when it is the same everywhere, else the worst.
        worst = max(counts, key=lambda count: abs(count - 1))
        targets.append(
            Target(f"{command}: plugins imported == 1 at every size", worst, 1, "plugins", True)
        )
    for command in NAMED:
        cost = ratio(row(high, command)["median_ms"], row(low, command)["median_ms"])
        targets.append(Target(f"{command}: {high} extra plugins / {low} <= 1.3", cost, 1.3))
    cost = ratio(row(high, LIST)["median_ms"] / 1000, torch_s)
    targets.append(Target(f"list --json of {high} extra plugins / import torch <= 0.5", cost, 0.5))
    return targets

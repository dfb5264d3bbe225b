"""The ``peers`` section as Markdown (a table, its targets, ``list``'s costs) and as a plot.

The plot has the per-step ratios, one panel per device and process count.

matplotlib is optional (the ``bench`` extra): without it :func:`plot_peers` returns a reason.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _figure(figures: dict[str, Any] | None, hand: bool) -> str:
    if figures is None:
        return ""
    if "error" in figures:
        return "failed (below)"
    said = []
    for kind, name in (("ratio", ""), ("cpu_ratio", "CPU ")):
        ratio = figures.get(kind)
        if ratio is not None:
            low, high = ratio["ci95"]
            said.append(f"{name}{ratio['median']:.2f}x [{low:.2f}, {high:.2f}]")
    if hand and said:
        said.insert(0, f"{figures['hand_ms_per_step']:g} ms")
    return "; ".join(said)


def render_peers(section: dict[str, Any]) -> str:
    """Render the section's table: a row per cell that ran, a column per workload.

    Each cell is the per-step ratio to the hand loop in the same process, the median of the rounds'
    ratios and its 95% interval, in wall-clock and in CPU time; the hand loop's rows have its ms per
    step, and its ratio to itself, the noise.
    """
    from .peers import PATHS

    keys = section["workloads"]
    rows, skipped, failed = [], {}, []
    for cell in section["cells"]:
        where = f"{cell['device']} x{cell['processes']}"
        if "skipped" in cell:
            skipped.setdefault(cell["skipped"], []).append(f"{cell['path']} ({where})")
            continue
        if "error" in cell:
            failed.append(f"- {cell['path']} on {where}: {cell['error'][-300:]}")
            continue
        workloads = cell["workloads"]
        hand = cell["path"] == "hand"
        rows.append((
            PATHS[cell["path"]][0], where, cell["startup_s"],
            max(cell["peak_rss_mib"]) if cell["peak_rss_mib"] else "",
            *(_figure(workloads.get(key), hand) for key in keys),
        ))  # fmt: skip
        failed += [
            f"- {cell['path']} on {where}, {key}: {figures['error'][:300]}"
            for key, figures in workloads.items()
            if "error" in figures
        ]
    headers = ("path", "on", "start-up to 1st step s", "peak RSS MiB (largest process)",
               *(f"{key}: per step / hand (wall; CPU)" for key in keys))  # fmt: skip
    parts = [
        f"{section['steps_per_run']} steps a run and process ({section['warm_steps']} left out "
        f"as warm-up), batch {section['batch']}, {section['rounds']} round(s) of pairs per "
        f"workload; {section['models']['cnn']}; {section['models']['gpt']}.",
        _table(headers, rows),
    ]
    if failed:
        parts.append("Failed:\n\n" + "\n".join(failed))
    if skipped:
        parts.append(
            "Not run:\n\n"
            + "\n".join(f"- {', '.join(cells)}: {reason}" for reason, cells in skipped.items())
        )
    if section.get("targets"):

        def named(target: dict[str, Any]) -> tuple[str, str]:
            """The target's words, and its worst workload (``targets`` puts it last)."""
            words, _, worst = target["target"].partition(" (worst: ")
            return words, worst.rstrip(")")

        cpu = {named(t)[0]: t for t in section.get("targets_cpu", [])}
        rows = []
        for t in section["targets"]:
            words, worst = named(t)
            other = cpu.get(words)
            rows.append((
                words, f"{t['measured']:g}x ({worst})", t["verdict"],
                "" if other is None else f"{other['measured']:g}x ({named(other)[1]})",
                "" if other is None else other["verdict"],
            ))  # fmt: skip
        headers = ("target (per step; worst workload)", "wall", "verdict", "CPU time",
                   "verdict (CPU)")  # fmt: skip
        parts.append(_table(headers, rows))
    listing = section.get("list")
    if listing:
        wall, cpu = listing["ratio_to_floor"], listing["cpu_ratio_to_floor"]

        def said(ratios: dict[str, Any], label: str) -> str:
            if label not in ratios:
                return "1x"
            low, high = ratios[label]["ci95"]
            return f"{ratios[label]['median']:g}x [{low:g}, {high:g}]"

        rows = [
            (label, ms, listing["median_cpu_ms"][label], said(wall, label), said(cpu, label))
            for label, ms in listing["median_ms"].items()
        ]
        headers = ("`accelctl list --json`, step by step", "wall ms", "CPU ms",
                   "wall / floor", "CPU / floor")  # fmt: skip
        parts.append(
            f"{listing['distributions']} distributions installed, {listing['repeats']} rounds:"
            f"\n\n{_table(headers, rows)}\n\n"
            + _table(("part", "CPU ms (median of pairs)"), list(listing["parts_cpu_ms"].items()))
        )
    return "\n\n".join(parts)


def plot_peers(section: dict[str, Any], path: Path) -> str | None:
    """Plot the per-step ratios to the hand loop with their 95% intervals into the PNG ``path``.

    One panel per device and process count; returns None when written, else why not.
    """
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install matplotlib, or the bench extra)"
    ran = [c for c in section.get("cells", []) if "workloads" in c and c["path"] != "hand"]
    if not ran:
        return "no cell of the peers section ran"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((c["device"], c["processes"]) for c in ran))
    keys = section["workloads"]
    figure, axes = plt.subplots(
        len(panels), 1, figsize=(9, 2.6 * len(panels)), dpi=110, squeeze=False
    )
    width = 0.8 / len(keys)
    for axis, (device, n) in zip(axes[:, 0], panels, strict=True):
        cells = [c for c in ran if (c["device"], c["processes"]) == (device, n)]
        for k, key in enumerate(keys):
            xs, ys, low, high = [], [], [], []
            for i, cell in enumerate(cells):
                ratio = cell["workloads"].get(key, {}).get("ratio")
                if ratio is None:
                    continue
                xs.append(i + (k - (len(keys) - 1) / 2) * width)
                ys.append(ratio["median"])
                low.append(ratio["median"] - ratio["ci95"][0])
                high.append(ratio["ci95"][1] - ratio["median"])
            axis.bar(xs, ys, width, yerr=[low, high], capsize=2, label=key)
        axis.axhline(1.0, color="grey", linewidth=1)
        axis.set_xticks(range(len(cells)))
        axis.set_xticklabels([c["path"] for c in cells], fontsize=7, rotation=15)
        axis.set_ylabel("per step / hand")
        axis.set_title(f"{device}, {n} process{'es' if n > 1 else ''}", fontsize=9)
        axis.grid(True, axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize=7, ncol=len(keys), loc="upper left")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return None

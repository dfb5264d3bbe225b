"""The plot of the scaling section: median time against installed plugins, one line per command.

``import torch`` (and half of it, the ``list`` target) are reference lines.

matplotlib is optional (the ``bench`` extra): without it :func:`plot_scaling` returns a reason and
draws nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

_STYLES = ("o-", "s-", "^-", "v-", "D-", "x-")


def plot_scaling(scaling: dict[str, Any], path: Path) -> str | None:
    """Draw ``scaling`` (the scaling section's results) into the PNG ``path``.

    :returns: None when written, else why not (matplotlib missing, nothing to draw).
    """
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install matplotlib, or the bench extra)"
    rows = scaling.get("rows") or []
    if not rows:
        return "the scaling section has no rows"
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.8), dpi=120)
    labels = list(dict.fromkeys(row["command"] for row in rows))
    for style, label in zip(_STYLES * 2, labels, strict=False):
        points = sorted(
            (row["extra_plugins"], row["median_ms"]) for row in rows if row["command"] == label
        )
        axes.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
    torch_ms = scaling["import_torch"]["median_ms"]
    axes.axhline(torch_ms, color="grey", linestyle="--", linewidth=1)
    right = max(scaling["sizes"]) or 1
    axes.annotate(
        f"import torch ({torch_ms:.0f} ms)",
        (right, torch_ms),
        ha="right",
        fontsize=8,
        color="grey",
        xytext=(-4, 3),
        textcoords="offset points",
    )
    axes.axhline(torch_ms / 2, color="grey", linestyle=":", linewidth=1)
    axes.annotate(
        "half of import torch (list target)",
        (right, torch_ms / 2),
        ha="right",
        fontsize=8,
        color="grey",
        xytext=(-4, 3),
        textcoords="offset points",
    )
    axes.set_xscale("symlog", linthresh=1)
    sizes = scaling["sizes"]
    axes.set_xticks(sizes)
    axes.set_xticklabels([str(size) for size in sizes])
    axes.set_xlabel("extra plugin distributions installed")
    axes.set_ylabel("median wall time (ms)")
    axes.set_xlim(0, max(sizes) * 1.15 if max(sizes) else 1)
    axes.set_ylim(bottom=0)
    axes.set_title("accelctl: start-up time against installed plugins")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.93))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return None

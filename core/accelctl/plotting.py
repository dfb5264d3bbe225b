"""A run's ``metrics.jsonl`` as a picture: ``accelctl plot ROOT_DIR -o run.png``, or::

    from accelctl.plotting import plot_metrics

    figure = plot_metrics("runs/1")            # the last run of runs/1/metrics.jsonl
    figure.savefig("run.png")

One column of panels over the optimizer step, one unit each, each drawn only where the run has
its figures: ``loss`` (``train_loss`` per logging step, and each epoch's ``*loss`` figures as
points), ``throughput`` (``samples_per_second``), ``FLOP/s`` (``flops_per_second``), ``MFU``
(``mfu``, 0-1) and ``memory`` (every ``memory_*_bytes`` figure, in GiB). Curves that share a
panel never hide each other: each after the first is drawn in a line style of its own (dashed,
dotted, ...), so that one lying exactly on another still shows both. Where an attempt after the
first took over (a restart, a resumed fit), a dashed line marks its first step; a step written
again shows its latest figures. matplotlib draws it (extra ``accelctl[plot]``) on its Agg canvas: no
display, no pyplot state.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._contract.errors import AccelctlError
from ._contract.extras import extra_missing
from ._readings.metrics_file import RunMetrics, read_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["RunMetrics", "plot_metrics", "read_metrics", "save_plot"]

#: A memory figure: the vocabulary's ``memory_*_bytes``, or a vendor's ``<name>.memory_*_bytes``.
MEMORY_KEY = re.compile(r"^(?:[\w-]+\.)?memory_\w*_bytes$")
GIB = float(1 << 30)
#: The line style of each curve of a panel, in turn: one lying on another still shows it.
LINE_STYLES = ("-", "--", ":", "-.")
#: The marker of each series of points of a panel, in turn (all but the first hollow).
MARKERS = ("o", "s", "^", "D")


def plot_metrics(source: str | Path | RunMetrics, run: str | None = None) -> Figure:
    """Plot the metrics of one run of ``source`` as a figure.

    ``run`` defaults to the last; ``source`` is a metrics file, the ``root_dir`` that holds one, or
    what :func:`read_metrics` returned. Each panel's title says what it shows (``loss``,
    ``throughput``, ``MFU``, ``memory``); each line's label is its key.

    :raises AccelctlError: as :func:`read_metrics`; matplotlib is not installed (an
        :class:`ImportError` too), naming the extra that installs it.
    """
    metrics = source if isinstance(source, RunMetrics) else read_metrics(source, run)
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError as exc:
        raise extra_missing("accelctl plot", "matplotlib", "plot", exc) from exc
    panels = [panel for panel in _PANELS if panel[1](metrics)]
    if not panels:
        raise AccelctlError(
            f"run {metrics.run!r} of {metrics.path} has nothing to draw: none of train_loss, an "
            "epoch's *loss, samples_per_second, flops_per_second, mfu, memory_*_bytes"
        )
    figure = Figure(figsize=(9, 2.6 * max(len(panels), 1)), layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (title, _, draw) in zip(axes, panels, strict=True):
        ax.set_title(title, loc="left")
        draw(ax, metrics)
        for step, label in metrics.resumes:
            ax.axvline(step, color="grey", linestyle="--", linewidth=0.8, label=f"_{label}")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    for step, label in metrics.resumes:  # named once, on the top panel
        axes[0].annotate(label, (step, 1), xycoords=("data", "axes fraction"), fontsize=8,
                         rotation=90, va="top", ha="right", color="grey")  # fmt: skip
    epochs = len(metrics.epochs)
    figure.suptitle(
        f"{metrics.path}: run {metrics.run or '(untagged)'}, {len(metrics.steps)} logged steps, "
        f"{epochs} epoch{'s' * (epochs != 1)}",
        fontsize=10,
    )
    return figure


def save_plot(
    source: str | Path | RunMetrics, output: str | Path, run: str | None = None
) -> Figure:
    """Plot the metrics with :func:`plot_metrics` and write the figure to ``output``.

    The suffix of ``output`` is the format: ``.png``, ``.svg``, ``.pdf``, ...

    :raises AccelctlError: as :func:`plot_metrics`; ``output`` cannot be written, or its suffix
        is not a format matplotlib writes.
    """
    figure = plot_metrics(source, run)
    try:
        figure.savefig(output, dpi=110)
    except ValueError as exc:  # matplotlib's "Format 'x' is not supported"
        raise AccelctlError(f"cannot write {output}: {exc}; give a .png (or .svg, .pdf)") from exc
    except OSError as exc:
        raise AccelctlError(f"cannot write {output}: {exc.strerror or exc}") from exc
    return figure


def _has_loss(metrics: RunMetrics) -> bool:
    return bool(_epoch_losses(metrics)) or "train_loss" in metrics.keys()


def _epoch_losses(metrics: RunMetrics) -> list[str]:
    return [key for key in metrics.keys("epoch") if key.endswith("loss")]


def _draw_loss(ax: Axes, metrics: RunMetrics) -> None:
    if "train_loss" in metrics.keys():
        ax.plot(*metrics.series("train_loss"), label="train_loss", linewidth=1.2)
    for index, key in enumerate(_epoch_losses(metrics)):
        # Points after the first series hollow, of another shape: equal figures show both.
        shape = MARKERS[index % len(MARKERS)]
        hollow: dict[str, Any] = (
            {"markerfacecolor": "none", "markeredgewidth": 1.5} if index else {}
        )
        ax.plot(*metrics.series(key, "epoch"), shape, label=f"{key} (epoch)", **hollow)
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)


def _has_throughput(metrics: RunMetrics) -> bool:
    return "samples_per_second" in metrics.keys()


def _draw_throughput(ax: Axes, metrics: RunMetrics) -> None:
    ax.plot(*metrics.series("samples_per_second"), label="samples_per_second")
    ax.set_ylabel("samples/s")
    ax.legend(fontsize=8)


def _has_flops(metrics: RunMetrics) -> bool:
    return "flops_per_second" in metrics.keys()


def _draw_flops(ax: Axes, metrics: RunMetrics) -> None:
    # A panel of its own, not a second axis over samples/s: the Trainer's FLOP/s is samples/s
    # times the model's FLOPs per sample, and two axes each scaled to their curve drew the one
    # exactly over the other.
    ax.plot(*metrics.series("flops_per_second"), color="tab:orange", label="flops_per_second")
    ax.set_ylabel("FLOP/s")
    ax.legend(fontsize=8)


def _has_mfu(metrics: RunMetrics) -> bool:
    return "mfu" in metrics.keys()


def _draw_mfu(ax: Axes, metrics: RunMetrics) -> None:
    ax.plot(*metrics.series("mfu"), label="mfu", color="tab:green")
    ax.set_ylabel("MFU (0-1)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)


def _memory_keys(metrics: RunMetrics) -> list[str]:
    return [key for key in metrics.keys() if MEMORY_KEY.match(key)]


def _draw_memory(ax: Axes, metrics: RunMetrics) -> None:
    for index, key in enumerate(_memory_keys(metrics)):
        steps, values = metrics.series(key)
        style = LINE_STYLES[index % len(LINE_STYLES)]
        # Wider beneath, narrower above: where two figures are equal (used and reserved), both
        # colours stay in sight.
        width = 2.4 - 0.5 * (index % len(LINE_STYLES))
        ax.plot(steps, [value / GIB for value in values], style, linewidth=width, label=key)
    ax.set_ylabel("GiB")
    ax.legend(fontsize=8)


_PANELS = (
    ("loss", _has_loss, _draw_loss),
    ("throughput", _has_throughput, _draw_throughput),
    ("FLOP/s", _has_flops, _draw_flops),
    ("MFU", _has_mfu, _draw_mfu),
    ("memory", lambda metrics: bool(_memory_keys(metrics)), _draw_memory),
)

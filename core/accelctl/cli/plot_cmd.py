"""``accelctl plot``: a run's ``metrics.jsonl`` as a picture.

Drawn by :mod:`accelctl.plotting`, which imports matplotlib only when it draws."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("plot")
@click.argument("source", type=click.Path(path_type=Path), metavar="ROOT_DIR_OR_FILE")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The picture to write; its suffix is the format (.png, .svg, .pdf). Default: "
    "metrics-<run>.png in the current folder.",
)
@click.option("--run", help="The run to draw (its `run` tag, e.g. run-3). Default: the last one.")
def plot_command(source: Path, output: Path | None, run: str | None) -> None:
    """Draw the figures of a Trainer's run.

    From ROOT_DIR_OR_FILE (its root_dir, or the metrics.jsonl itself): loss, throughput (samples/s,
    FLOP/s), MFU and memory, over the step. Needs accelctl[plot] (matplotlib).

    Exits 1 when the file is missing, holds no figures, has no such run, or the picture cannot
    be written.
    """
    from .. import plotting

    metrics = plotting.read_metrics(source, run)
    if output is None:
        output = Path(f"metrics-{metrics.run or 'run'}.png".replace("/", "_"))
    plotting.save_plot(metrics, output)
    if metrics.skipped:
        lines = ", ".join(map(str, metrics.skipped[:5])) + (", ..." * (len(metrics.skipped) > 5))
        click.echo(
            f"warning: skipped {len(metrics.skipped)} line(s) of {metrics.path} that are not "
            f"JSON objects (a line torn by a crash?): line {lines}",
            err=True,
        )
    others, epochs = len(metrics.runs) - 1, len(metrics.epochs)
    note = f" (the file has {others} other run{'s' * (others != 1)}: --run)" if others else ""
    click.echo(
        f"wrote {output}: run {metrics.run}, {len(metrics.steps)} logged steps, "
        f"{epochs} epoch{'s' * (epochs != 1)}{note}"
    )

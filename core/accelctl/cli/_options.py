"""Options shared by the commands that select an accelerator (``resolve``, ``launch``)."""

from __future__ import annotations

from collections.abc import Callable

import click
from click.decorators import FC

accelerator_option = click.option(
    "--accelerator",
    "-a",
    default="auto",
    show_default=True,
    help='A name or alias, "gpu" or "auto".',
)


def devices_option(extra_help: str = "") -> Callable[[FC], FC]:
    """``--devices/-d`` (default ``"auto"``), with ``extra_help`` appended to its help."""
    return click.option(
        "--devices",
        "-d",
        default="auto",
        show_default=True,
        help=f'"auto", a count ("2"), or indices ("0,1"){extra_help}.',
    )

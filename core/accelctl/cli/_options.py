"""Options shared by the commands that select an accelerator (``resolve``, ``launch``).

``--devices`` is handed as typed to the plugin's parser, so the command line reads the same
grammar as Python (:mod:`accelctl._contract.device_specs`); its help lists the forms a string
can take.
"""

from __future__ import annotations

from collections.abc import Callable

import click
from click.decorators import FC

from .._contract.device_specs import INDEXED_FORMS, PROCESS_COUNT_FORMS

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
        help=f"{INDEXED_FORMS.strings}; for the CPU, a process count: "
        f"{PROCESS_COUNT_FORMS.strings}{extra_help}.",
    )

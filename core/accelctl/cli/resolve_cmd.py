"""``accelctl resolve``: what a Trainer with these arguments would run on."""

from __future__ import annotations

import click

from .._contract.errors import AccelctlError
from ._child import run_in_child
from ._options import accelerator_option, devices_option
from ._output import echo_line, emit_json
from ._selecting import resolve_in_time


@click.command("resolve")
@accelerator_option
@devices_option()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def resolve_command(accelerator: str, devices: str, as_json: bool) -> None:
    """Show the accelerator and devices a Trainer would run on.

    Exits 1 with the reason when the selection is impossible (with --json, also as {"error",
    "error_type"} on stdout)."""
    try:
        # The plugins asked in a process of their own; the selection comes back as its data.
        [data] = run_in_child(lambda: iter([resolve_in_time(accelerator, devices).to_dict()]))
    except AccelctlError as exc:
        if as_json:  # a program reading stdout gets a document either way
            emit_json({"error": " ".join(str(exc).split()), "error_type": type(exc).__name__})
        raise  # and the one line on stderr, exit 1
    if as_json:
        emit_json(data)
        return
    plugin = " ".join(filter(None, [data["distribution"], data["version"]]))
    echo_line(f"accelerator:         {data['accelerator']}" + (f" ({plugin})" if plugin else ""))
    echo_line(f"devices:             {', '.join(data['devices'])}")
    echo_line(f"distributed backend: {data['distributed_backend'] or 'none (one process only)'}")

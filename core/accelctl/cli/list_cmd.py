"""``accelctl list``: every installed accelerator, broken ones included."""

from __future__ import annotations

import click

from .._registry import list_accelerators
from .._status import AcceleratorStatus
from ._output import echo_line, emit_json, format_table, yes_no

HEADERS = ("NAME", "AVAILABLE", "DEVICES", "FAMILY", "PRIORITY", "PLUGIN", "DESCRIPTION")


def _row(status: AcceleratorStatus) -> tuple[object, ...]:
    state, plugin = status.state, status.distribution or "?"
    # What else it answers to, after its name (the generic PrivateUse1 plugin: "privateuse1
    # (openreg)", the backend's own name, which accelctl's messages use for it).
    aliases = ", ".join(status.info.aliases) if status.info is not None else ""
    return (
        f"{status.name} ({aliases})" if aliases else status.name,
        state if state in ("broken", "disabled") else yes_no(status.available),
        status.device_count,
        status.family,
        status.priority,
        f"{plugin} {status.version}" if status.version else plugin,
        status.description or None,
    )


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array (one object per plugin).")
@click.option(
    "--no-detect",
    is_flag=True,
    help="Read package metadata only: import and run no plugin code.",
)
def list_command(as_json: bool, no_detect: bool) -> None:
    """List installed accelerators: availability, devices, family, priority, plugin.

    Always exits 0: a broken plugin shows as a row with its error.
    """
    statuses = list_accelerators(detect=not no_detect)  # each plugin under its deadline
    if as_json:
        emit_json([status.to_dict() for status in statuses])
        return
    if not statuses:
        click.echo("no accelerator plugin is installed; try: pip install accelctl-cpu")
        return
    click.echo(format_table(HEADERS, [_row(status) for status in statuses]))
    notes = [(s.name, f"error: {s.error}" if s.error else s.reason) for s in statuses]
    if any(note for _, note in notes):
        click.echo("")
        for name, note in notes:
            if note:
                echo_line(f"{name}: {note}")

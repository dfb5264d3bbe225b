"""``accelctl list``: every installed accelerator, broken ones included."""

from __future__ import annotations

import click

from .._registry import AcceleratorRecord, list_accelerators
from ._output import echo_line, emit_json, format_table, yes_no

HEADERS = ("NAME", "AVAILABLE", "DEVICES", "FAMILY", "PRIORITY", "PLUGIN", "DESCRIPTION")


def _available_cell(record: AcceleratorRecord) -> str | None:
    if record.state in ("broken", "disabled"):
        return record.state
    return yes_no(record.available)


def _plugin_cell(record: AcceleratorRecord) -> str:
    dist = record.distribution or "?"
    return f"{dist} {record.version}" if record.version else dist


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
    records = list_accelerators(detect=not no_detect)
    if as_json:
        emit_json([record.to_dict() for record in records])
        return
    if not records:
        click.echo("no accelerator plugin is installed; try: pip install accelctl-cpu")
        return
    rows = [
        (
            r.name,
            _available_cell(r),
            r.device_count,
            r.family,
            r.priority,
            _plugin_cell(r),
            r.description or None,
        )
        for r in records
    ]
    click.echo(format_table(HEADERS, rows))
    notes = [(r.name, f"error: {r.error}" if r.error else r.reason) for r in records]
    notes = [(name, note) for name, note in notes if note]
    if notes:
        click.echo("")
        for name, note in notes:
            echo_line(f"{name}: {note}")

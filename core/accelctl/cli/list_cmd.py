"""``accelctl list``: every installed accelerator, broken ones included."""

from __future__ import annotations

from typing import Any

import click

from .._host.registry import list_accelerators
from .._host.status import AcceleratorStatus
from ._child import run_in_child
from ._output import echo_line, emit_json, format_table, yes_no

HEADERS = ("NAME", "AVAILABLE", "DEVICES", "FAMILY", "PRIORITY", "PLUGIN", "DESCRIPTION")


def _row(status: AcceleratorStatus) -> tuple[object, ...]:
    state, plugin = status.state, status.distribution or "?"
    # What else it answers to, after its name (the CUDA plugin on an AMD GPU: "cuda (rocm)").
    info = status.info
    aliases = ", ".join(a for a in info.aliases if a != status.name) if info is not None else ""
    if status.version:
        plugin += f" {status.version}"
    if status.plugin_name != status.name:  # the generic PrivateUse1 plugin serving "openreg"
        plugin += f" (plugin {status.plugin_name})"
    return (
        f"{status.name} ({aliases})" if aliases else status.name,
        state if state in ("broken", "disabled") else yes_no(status.available),
        status.device_count,
        status.family,
        status.priority,
        plugin,
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
    if no_detect:  # no plugin code runs
        rows = _rows(no_detect=True)
    else:  # each plugin under its deadline, in a process of their own
        [rows] = run_in_child(lambda: iter([_rows(no_detect=False)]))
    if as_json:
        emit_json([document for document, _, _ in rows])
        return
    if not rows:
        click.echo("no accelerator plugin is installed; try: pip install accelctl-cpu")
        return
    click.echo(format_table(HEADERS, [row for _, row, _ in rows]))
    if any(note for _, _, note in rows):
        click.echo("")
        for document, _, note in rows:
            if note:
                echo_line(f"{document['name']}: {note}")


def _rows(no_detect: bool) -> list[tuple[dict[str, Any], tuple[object, ...], str | None]]:
    """Per plugin: its JSON object, its table row and its note (plain data)."""
    return [
        (
            status.to_dict(),
            _row(status),
            f"error: {status.error}" if status.error else status.reason,
        )
        for status in list_accelerators(detect=not no_detect)
    ]

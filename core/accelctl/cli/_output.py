"""Shared output helpers of the CLI: JSON on stdout, aligned tables for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (one document)."""
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned plain-text table; None shows as "-"."""
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def yes_no(value: bool | None) -> str | None:
    """ "yes"/"no" for a bool, None for unknown."""
    return None if value is None else ("yes" if value else "no")

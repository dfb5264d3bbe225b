"""Shared output helpers of the CLI: strict JSON on stdout, aligned tables for people.

Both carry others' text (plugins', package metadata, the user's): cells are one escaped line of
bounded length (:func:`accelctl._base.text.clean`), JSON strings are bounded (JSON escapes the rest
itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import click

from .._base.text import FIELD_LIMIT, JSON_STRING_LIMIT, bound, clean, printable_line


def strict_json_data(data: Any) -> Any:
    """Make ``data`` fit for strict JSON.

    A float that is not finite (NaN, infinity) becomes None (``null``), as the Trainer writes its
    metrics, and every string (keys too) is bounded to
    :data:`~accelctl._base.text.JSON_STRING_LIMIT` characters."""
    if isinstance(data, str):
        return bound(data, JSON_STRING_LIMIT)
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        limit = JSON_STRING_LIMIT
        return {
            (bound(k, limit) if isinstance(k, str) else k): strict_json_data(v)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [strict_json_data(value) for value in data]
    return data


def json_text(data: Any, indent: int | None = 2) -> str:
    """``data`` as a strict JSON document (no ``NaN`` or ``Infinity``: :func:`strict_json_data`)."""
    return json.dumps(strict_json_data(data), indent=indent, sort_keys=False, allow_nan=False)


def emit_json(data: Any) -> None:
    """Print ``data`` as indented, strict JSON on stdout (one document)."""
    click.echo(json_text(data))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Format an aligned plain-text table.

    None shows as "-"; each cell is one escaped line of at most about
    :data:`~accelctl._base.text.FIELD_LIMIT` characters."""
    table = [list(headers)] + [
        ["-" if value is None else clean(str(value), FIELD_LIMIT) for value in row] for row in rows
    ]
    widths = [max(map(len, column)) for column in zip(*table, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


def echo_line(text: str, err: bool = False) -> None:
    """Print one line that carries others' text, made safe.

    Escaped, bounded, alignment kept (see :func:`accelctl._base.text.printable_line`)."""
    click.echo(printable_line(text), err=err)


def yes_no(value: bool | None) -> str | None:
    """ "yes"/"no" for a bool, None for unknown."""
    return None if value is None else ("yes" if value else "no")

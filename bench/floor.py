"""The floor of any pluggy + click command line: a throwaway CLI that lists entry points.

It imports click and pluggy, builds a plugin manager, scans the ``accelctl.accelerators`` entry
points once and prints their names as JSON. It loads no plugin; no CLI built on these two libraries
starts faster.

Run as a script (``python bench/floor.py list``), not imported.
"""

from __future__ import annotations

import json
from importlib import metadata

import click
import pluggy


@click.group()
def cli() -> None:
    """A minimal pluggy + click CLI."""


@cli.command("list")
def list_command() -> None:
    """Print the names of the installed accelerator entry points."""
    pluggy.PluginManager("accelctl")
    names = sorted(ep.name for ep in metadata.entry_points(group="accelctl.accelerators"))
    click.echo(json.dumps(names))


if __name__ == "__main__":
    cli()

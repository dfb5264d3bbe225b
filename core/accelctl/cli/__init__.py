"""The ``accelctl`` command line (click). Each command lives in a module of its own."""

from __future__ import annotations

from .main import cli, main

__all__ = ["cli", "main"]

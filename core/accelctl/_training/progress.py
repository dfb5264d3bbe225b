"""The progress bar: tqdm, on rank 0, when standard output is a terminal."""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from .._contract.errors import AccelctlError


def progress_bar(enabled: bool | None, *, total: int | None, description: str) -> Any | None:
    """A tqdm bar over ``total`` steps, or None when no bar is shown.

    :param enabled: True: always (tqdm must be installed); False: never; None: when standard
        output is a terminal and tqdm is installed.
    """
    if enabled is False or (enabled is None and not _is_terminal()):
        return None
    try:
        tqdm = importlib.import_module("tqdm").tqdm
    except ImportError:
        if enabled:
            raise AccelctlError(
                "enable_progress_bar=True needs tqdm, which is not installed: pip install tqdm"
            ) from None
        return None
    return tqdm(total=total, desc=description, unit="step", dynamic_ncols=True, leave=True)


def _is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


@contextlib.contextmanager
def redirected_logging(bar: Any | None) -> Iterator[None]:
    """Route the ``accelctl`` logger's terminal lines through tqdm while ``bar`` is shown.

    They show above the bar instead of through it."""
    if bar is None:
        yield
        return
    redirect = importlib.import_module("tqdm.contrib.logging").logging_redirect_tqdm
    with redirect(loggers=[logging.getLogger("accelctl")]):
        yield

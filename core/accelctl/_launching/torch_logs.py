"""Silencing torch's launcher logs while accelctl launches: the failure is reported in one line."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_torch_logs(quiet: bool) -> Iterator[None]:
    """Quiet torch.distributed's and torch.multiprocessing's loggers for the duration.

    They are raised to CRITICAL, unless ``LOGLEVEL`` is set: their warnings and records repeat
    the launcher's one line."""
    if not quiet or os.environ.get("LOGLEVEL"):
        yield
        return
    import torch.distributed.run  # noqa: F401  (creates the loggers, each with its own level)

    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.startswith(("torch.distributed", "torch.multiprocessing"))
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)

"""How long a collective may wait for the other processes before the run is declared hung.

Not torch's 30 minutes but ``ACCELCTL_COLLECTIVE_TIMEOUT``, which must exceed the longest a process
spends alone between two collectives (a slow step, rank 0's checkpoint)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from .._contract import settings
from .._contract.errors import ProcessSetupError, TrainerError

#: The variable that sets the timeout, in seconds.
ENV_COLLECTIVE_TIMEOUT = settings.COLLECTIVE_TIMEOUT
#: Five minutes: far above a step or a checkpoint of a model that fits one device.
DEFAULT_TIMEOUT_S = settings.DEFAULT_COLLECTIVE_TIMEOUT_S
#: What gloo's (and NCCL's) errors say when a collective's time ran out.
_TIMEOUT_MARKERS = ("timed out", "timeout")


class CollectiveTimeoutError(TrainerError):
    """A collective did not complete in time.

    Another process hung, died silently or is slower than ``ACCELCTL_COLLECTIVE_TIMEOUT`` allows."""


def collective_timeout(environ: Mapping[str, str] | None = None) -> datetime.timedelta:
    """Return the timeout of the Trainer's process group.

    ``ACCELCTL_COLLECTIVE_TIMEOUT`` or 300 s; a :class:`ProcessSetupError` for a value that is not a
    positive number of seconds."""
    try:
        return datetime.timedelta(seconds=settings.collective_timeout(environ))
    except settings.SettingError as exc:
        raise ProcessSetupError(str(exc)) from None


def explain_timeout(
    error: BaseException, *, timeout: datetime.timedelta, rank: int, world_size: int, step: int
) -> CollectiveTimeoutError | None:
    """A one-line error for a collective's timeout, or None when ``error`` is something else."""
    text = str(error)
    if not isinstance(error, RuntimeError) or not any(m in text.lower() for m in _TIMEOUT_MARKERS):
        return None
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return CollectiveTimeoutError(
        f"rank {rank} of {world_size} waited {timeout.total_seconds():g} s in a collective after "
        f"optimizer step {step} and gave up: another process hung, died without closing its "
        f"connections, or works longer than that alone (raise {ENV_COLLECTIVE_TIMEOUT}, in "
        f"seconds, for slow steps or checkpoints). torch: {first}"
    )

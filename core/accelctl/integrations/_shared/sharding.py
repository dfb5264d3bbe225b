"""FSDP2 on an accelctl accelerator: the check both bridges make before sharding.

Made before a framework shards a model, so that a device that cannot run FSDP2 is refused with its
capabilities' own reasons (``accelctl.capabilities.fsdp_gaps``) instead of torch's stack trace in
every rank."""

from __future__ import annotations

import os

from accelctl import AcceleratorHandle, ProcessSetupError


def refuse_fsdp_gaps(
    handle: AcceleratorHandle, device_type: str, backend: str | None, asked: str, instead: str
) -> None:
    """Raise :class:`accelctl.ProcessSetupError` when FSDP2 misses something on ``device_type``.

    Over ``backend``: what this process can check without a process group; checked in local
    rank 0 only.

    :param asked: what the user asked for, as they wrote it (``"ModelParallelStrategy"``).
    :param instead: how to ask for DDP instead, for the message (``"strategy='ddp'"``).
    """
    if os.environ.get("LOCAL_RANK", "0") != "0":
        # One check per machine, in local rank 0 (the process that launches, or the launcher's
        # first): fsdp_gaps runs on the device of index 0, where another rank would start a
        # runtime on its neighbour's device. The other ranks wait for rank 0 in
        # init_process_group, so its refusal comes first.
        return
    from accelctl.capabilities import fsdp_gaps

    gaps = fsdp_gaps(device_type, backend)
    if not gaps:
        return
    listed = "; ".join(f"{gap.name} ({gap.reason.rstrip('.')})" for gap in gaps)
    raise ProcessSetupError(
        f"{asked} shards the model with torch's FSDP2, which accelctl accelerator "
        f"{handle.name!r} cannot run on its {device_type!r} devices over {backend!r}: it lacks "
        f"{listed}. `accelctl validate --capabilities` shows what the device can train; train "
        f"with DDP there instead ({instead})"
    )

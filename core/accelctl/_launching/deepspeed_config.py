"""The DeepSpeed config a script's command line names, checked before any process starts.

``accelctl launch`` checks it: the set-ups the DeepSpeed bridge would refuse in each process
(:mod:`accelctl._deepspeed.refusals`), refused once, here, with the same words
(docs/design/deepspeed-refused-at-launch.md)."""

from __future__ import annotations

from collections.abc import Sequence

from .._choice.selection import Selection
from .._contract.errors import ProcessSetupError
from .._deepspeed.refusals import (
    config_on_command_line,
    float64_norms_refusal,
    offload_refusal,
    runs_float64,
    zero_stage,
)


def check_deepspeed_config(script: str, script_args: Sequence[str], selection: Selection) -> None:
    """Refuse the DeepSpeed config ``script_args`` names where it cannot run on the device.

    Named as ``--deepspeed_config PATH``, ...; the device is the selection's. Nothing to read,
    or the CPU, passes at once.

    :raises accelctl.ProcessSetupError: the bridge's own message, with where the config came from.
    """
    given = config_on_command_line(script_args)
    device = selection.devices[0]
    if given is None or device.type == "cpu":
        return
    name = selection.shown_name
    problem = offload_refusal(given.config, name, device) or float64_norms_refusal(
        zero_stage(given.config), name, device, lambda: runs_float64(device.type)
    )
    if problem is not None:
        raise ProcessSetupError(
            f"{problem} (the DeepSpeed config {given.path}, from {given.option} on {script}'s "
            f"command line; refused before any process started)"
        )

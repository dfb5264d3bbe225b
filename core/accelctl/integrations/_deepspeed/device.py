"""DeepSpeed's accelerator made the plugin's for one process whose device is already chosen.

By :func:`accelctl.integrations.deepspeed.use_plugin` (from the launcher's variables), or by another
bridge that starts DeepSpeed for its framework (Lightning's ``DeepSpeedStrategy``, Accelerate's
``DeepSpeedPlugin``, transformers' ``TrainingArguments(deepspeed=...)``), which places its processes
by its own rules and must not run ``use_plugin``'s import-time choice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .adaptation import ADAPTATION

if TYPE_CHECKING:
    import torch

    import accelctl

    from .accelerator import PluginAccelerator


def use_device(
    handle: accelctl.AcceleratorHandle,
    device: torch.device,
    local_world_size: int,
    *,
    rank: int | None = None,
    stacklevel: int = 2,
) -> PluginAccelerator:
    """Make DeepSpeed's accelerator in this process ``handle``'s on ``device``.

    Call it before DeepSpeed's process group or engine is made. ``device`` is made current
    with the plugin's ``setup_device``; returns the ``DeepSpeedAccelerator`` set.

    :param local_world_size: the processes on this machine.
    :param rank: this process's rank, for the kernels' warnings (None: ``RANK``).
    :param stacklevel: where a warning about an untested DeepSpeed release points.
    :raises accelctl.FrameworkVersionError: a DeepSpeed release the bridge cannot run on.
    :raises accelctl.ProcessSetupError: a DeepSpeed whose ``DeepSpeedAccelerator`` declares
        methods the bridge does not implement.
    """
    try:
        ADAPTATION.require()  # before anything of DeepSpeed
        import deepspeed
        from deepspeed.accelerator import set_accelerator
    except ModuleNotFoundError as exc:
        from .._shared.missing import framework_missing

        raise framework_missing("deepspeed", "DeepSpeed", exc) from exc
    from accelctl._kernels.setup import set_up_kernels

    from . import initialize, ops
    from .accelerator import accelerator_class

    chosen = accelerator_class()(handle, device, local_world_size)
    handle.setup_device(device)
    set_up_kernels(handle, device, rank=rank)  # once per process: after setup_device
    set_accelerator(chosen)
    if ADAPTATION.refusal is None:
        ADAPTATION.check(deepspeed.__version__, stacklevel=stacklevel + 1)
    if ADAPTATION.refusal == "":
        ops.rebind()
        initialize.wrap(chosen)
    return chosen

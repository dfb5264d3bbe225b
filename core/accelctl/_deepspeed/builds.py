"""Which of DeepSpeed's compiled ops a device gets, and what building the host's takes.

The facts the bridge's op builders (``accelctl.integrations._deepspeed.ops``) apply, and that
the capability matrix reports (``deepspeed-device-ops``, ``deepspeed-host-ops``) without
importing DeepSpeed or torch.

- On the CPU every op is DeepSpeed's own CPU build, as with DeepSpeed's CPU accelerator.
- Elsewhere the host ops (:data:`HOST_OPS`: ZeRO-Offload's CPU optimizers, async I/O, pinned
  memory) are DeepSpeed's CPU builds, compiled by torch's ``cpp_extension`` on first use: on a
  device that is not the CPU DeepSpeed never loads a build its install made (it keeps those for
  the accelerator it was installed for), so they need ``ninja`` and a C++ compiler whatever
  ``DS_BUILD_OPS`` was; every other op has no build for the device.
"""

from __future__ import annotations

import os
import shutil

#: DeepSpeed's CPU builds of its ops.
HOST_BUILDERS = "deepspeed.ops.op_builder.cpu"
#: The ops that run on the host whatever the device.
HOST_OPS = frozenset(
    {"CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder", "AsyncIOBuilder", "PinMemoryBuilder"}
)
#: DeepSpeed's own collectives for CPUs (shared memory, oneCCL), which its CPU accelerator builds
#: when a group starts: the bridge's collectives are the plugin's backend's.
COMMUNICATION_OPS = frozenset({"ShareMemCommBuilder", "CCLCommBuilder"})
#: The device ops a training config reaches (``"optimizer": {"type": "Adam"}``, ...).
TRAINING_DEVICE_OPS = ("FusedAdamBuilder", "FusedLambBuilder", "FusedLionBuilder")
#: DeepSpeed's ``"optimizer": {"type": ...}`` names (lower-cased) that ZeRO-Offload steps with a
#: CPU op of its own, and that op's builder.
OFFLOAD_OPTIMIZERS = {
    "adam": "CPUAdamBuilder",
    "adamw": "CPUAdamBuilder",
    "adagrad": "CPUAdagradBuilder",
    "lion": "CPULionBuilder",
}


def _names(builders: frozenset[str] | tuple[str, ...]) -> str:
    return ", ".join(sorted(name.removesuffix("Builder") for name in builders))


def host_build_problem() -> str | None:
    """Say what this machine lacks to build DeepSpeed's host ops; None where it has it all.

    They are built on first use by torch's ``cpp_extension``, which needs ``ninja`` and the C++
    compiler ``$CXX``, else ``c++``, on ``PATH``."""
    compiler = os.environ.get("CXX") or "c++"
    missing = []
    if shutil.which(compiler) is None:
        missing.append(f"no C++ compiler ({compiler!r}, from $CXX or else 'c++') on PATH")
    if shutil.which("ninja") is None:
        missing.append("no ninja on PATH (pip install ninja)")
    return "; ".join(missing) or None


def host_ops_row(device_type: str) -> tuple[bool, str]:
    """Return the ``deepspeed-host-ops`` row beside ``device_type``.

    Whether DeepSpeed's host ops can be built here, and why."""
    problem = host_build_problem()
    where = "on the CPU" if device_type == "cpu" else f"beside {device_type!r} devices"
    if problem is not None:
        return False, (
            f"DeepSpeed's host ops ({_names(HOST_OPS)}: ZeRO-Offload's CPU optimizers) are "
            f"compiled on first use {where}, and this machine has {problem}: ZeRO-Offload "
            'with a DeepSpeed optimizer is refused; a torch optimizer with "zero_force_ds_cpu_'
            'optimizer": false runs'
        )
    return True, (
        f"DeepSpeed's host ops ({_names(HOST_OPS)}) are its CPU builds, compiled on first use "
        f"{where}: ninja and a C++ compiler are on PATH"
    )


def device_ops_row(device_type: str) -> tuple[bool, str]:
    """Return the ``deepspeed-device-ops`` row for ``device_type``.

    Whether DeepSpeed's compiled device ops (fused Adam, Lamb, Lion, the transformer kernels, ...)
    have a build for it through the bridge, and why."""
    if device_type == "cpu":
        return True, "DeepSpeed's own CPU builds of its ops, as with its CPU accelerator"
    return False, (
        f"DeepSpeed builds its device ops for its own list of devices: none for {device_type!r} "
        f"({_names(TRAINING_DEVICE_OPS)} and the others raise MissingOpError); a torch "
        'optimizer, or "torch_adam": true, runs instead'
    )

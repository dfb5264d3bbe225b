"""Whether a device's result is the CPU's, within what the dtype allows.

A missing kernel raises, a placeholder or a wrong one gives another result (uninitialised memory,
zeros, NaN).

The tolerance is meant to catch those, not rounding: 16 units in the last place of the coarser
of the result's dtype and TF32 (a real device may run a float32 matmul or convolution in TF32,
as CUDA's cuDNN does by default), relative to the largest magnitude of the CPU's result, so
that a reduction's rounding in small elements does not count. That is 2**-6 for float32 and
float16, 2**-3 for bfloat16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: Units in the last place a result may differ by, relative to the CPU's largest magnitude.
ULPS = 16
#: The mantissa step of TF32 (10 bits), the coarsest a device may use for float32 matmuls.
TF32_EPS = 2.0**-10


def tolerance(dtype: torch.dtype) -> float:
    """The relative difference allowed in a result of ``dtype`` (see the module's docstring)."""
    import torch

    return ULPS * max(torch.finfo(dtype).eps, TF32_EPS)


def difference(device: Any, cpu: Any, *, dtypes: bool = True) -> str | None:
    """Say what differs between the device's result and the CPU's; None where they agree.

    Results are tensors, or tuples and lists of them, the device's on any device; they agree within
    :func:`tolerance`. ``dtypes=False``: tensors of two floating-point dtypes are compared within
    the coarser's tolerance (autocast's policies differ in what they keep in float32)."""
    import torch

    if isinstance(cpu, (tuple, list)):
        if not isinstance(device, (tuple, list)) or len(device) != len(cpu):
            return f"gave {_kind(device)} where the CPU gave {len(cpu)} results"
        for index, (mine, theirs) in enumerate(zip(device, cpu, strict=True)):
            found = difference(mine, theirs, dtypes=dtypes)
            if found is not None:
                return f"result {index} {found}" if len(cpu) > 1 else found
        return None
    if not isinstance(cpu, torch.Tensor):
        return None if device == cpu else f"gave {device!r} where the CPU gave {cpu!r}"
    if not isinstance(device, torch.Tensor):
        return f"gave {_kind(device)} where the CPU gave a tensor"
    if device.shape != cpu.shape:
        return f"has shape {tuple(device.shape)} where the CPU's has {tuple(cpu.shape)}"
    allowed = tolerance(cpu.dtype) if cpu.is_floating_point() else 0.0
    if device.dtype != cpu.dtype:
        if dtypes or not (device.is_floating_point() and cpu.is_floating_point()):
            return f"is {_dtype(device.dtype)} where the CPU's is {_dtype(cpu.dtype)}"
        allowed = max(allowed, tolerance(device.dtype))
    mine = device.detach().cpu()
    theirs = cpu.detach()
    if not theirs.is_floating_point():
        return None if torch.equal(mine, theirs) else "differs from the CPU's"
    mine, theirs = mine.double(), theirs.double()
    if not torch.equal(torch.isfinite(mine), torch.isfinite(theirs)):
        return "has NaN or infinite values where the CPU's has none (or the reverse)"
    finite = torch.isfinite(theirs)
    if not finite.any():
        return None
    largest = float(theirs[finite].abs().max())
    error = float((mine[finite] - theirs[finite]).abs().max()) / max(largest, 1e-30)
    if error <= allowed:
        return None
    return (
        f"differs from the CPU's by {error:.3g} of its largest magnitude "
        f"(allowed {allowed:.3g} for {_dtype(device.dtype)})"
    )


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"{len(value)} results"
    return "None" if value is None else type(value).__name__

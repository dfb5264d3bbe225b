"""The names of the variables that choose the GPUs a process sees, apart from their parsing.

Every ``accelctl list`` needs the names (the probe is cached per setting of them, ``accelctl env``
reports them), but only a machine with a GPU driver needs them read: :mod:`accelctl_cuda.visible`
does that, with a regex and the GPU records, and is imported once a driver is found.
"""

from __future__ import annotations

#: The CUDA runtime's variable (HIP honours it too, after ``HIP_VISIBLE_DEVICES``).
CUDA_VAR = "CUDA_VISIBLE_DEVICES"
#: HIP's variable: picks among the GPUs ``ROCR_VISIBLE_DEVICES`` left, by index.
HIP_VAR = "HIP_VISIBLE_DEVICES"
#: The ROCm runtime's variable: filters the physical AMD GPUs first.
ROCR_VAR = "ROCR_VISIBLE_DEVICES"
#: Every variable that chooses or orders the GPUs torch sees: the probe is made anew when one
#: changes, and ``accelctl env`` reports those that are set.
DEVICE_VARIABLES = (CUDA_VAR, "CUDA_DEVICE_ORDER", HIP_VAR, ROCR_VAR)

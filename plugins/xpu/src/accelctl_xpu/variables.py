"""The names of the variables that choose the Intel GPUs a process sees, apart from their parsing.

Every ``accelctl list`` needs the names (the probe is cached per setting of them, ``accelctl env``
reports them), but only a machine with an Intel GPU and an XPU build of torch needs them read:
:mod:`accelctl_xpu.visible` does that, with its regex, and is imported only there.
"""

from __future__ import annotations

#: Level Zero's device mask (``"0,2"``, ``"1.0"``).
AFFINITY_VAR = "ZE_AFFINITY_MASK"
#: The SYCL runtime's device selector (``"level_zero:0"``).
SELECTOR_VAR = "ONEAPI_DEVICE_SELECTOR"
#: Both: the probe is made anew when one changes, and ``accelctl env`` reports those that are set.
DEVICE_VARIABLES = (AFFINITY_VAR, SELECTOR_VAR)

"""Model FLOPs and how much of the devices' peak they use: ``flops_per_second`` and ``mfu``.

The model's FLOPs per sample are known once: counted on the first optimizer step of a fit (its
``training_step`` and backward, under torch's ``FlopCounterMode``, divided by the step's samples),
or declared by the user (``Trainer(flops_per_sample=...)``). Every later step runs as if nothing
counted (a shared no-op context). The figures are derived from the samples per second the fit
measures already: no step waits for anything more.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from .._contract.errors import AccelctlError, PluginWarning, TrainerError, warn_user
from .._contract.peak import DevicePeak

#: ``flops_per_sample="auto"``: count them on the first step.
AUTO = "auto"

#: The data type whose peak a precision's matrix products run at (``"32"``: see
#: :func:`peak_dtype`).
_PRECISION_DTYPES = {"bf16-mixed": "bfloat16", "16-mixed": "float16"}

_NOTHING = contextlib.nullcontext()


def parse_flops_per_sample(value: Any) -> float | str | None:
    """``Trainer(flops_per_sample=...)``: ``"auto"``, a number > 0, or None (no FLOPs figures).

    :raises TrainerError: for anything else, naming the accepted values.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return float(value)
    raise TrainerError(
        f"flops_per_sample={value!r} is not accepted: give 'auto' (count them on the first "
        f"step), the model's FLOPs per sample of one training step, forward and backward (a "
        f"number > 0), or None (log no flops_per_second and no mfu)"
    )


def peak_dtype(precision: str, peak: DevicePeak) -> str:
    """Return the data type of ``peak`` that a fit in ``precision`` is measured against.

    Bfloat16 and float16 for mixed precision; for ``"32"``, tf32 where torch lets float32 matrix
    products use it (``torch.get_float32_matmul_precision()`` is not ``"highest"``) and the peak has
    it, else float32."""
    if precision in _PRECISION_DTYPES:
        return _PRECISION_DTYPES[precision]
    import torch

    if torch.get_float32_matmul_precision() != "highest" and "tf32" in peak.flops:
        return "tf32"
    return "float32"


class Throughput:
    """One fit's FLOPs figures: what a sample costs, and the peak the run is measured against.

    :param flops_per_sample: ``"auto"`` (counted on the first step), a declared number, or None.
    :param peak_flops: one device's peak FLOPs per second for the fit's precision; None: unknown
        (no ``mfu``).
    :param devices: the devices of the run (its processes): the peak is theirs together.
    """

    def __init__(
        self, flops_per_sample: float | str | None, peak_flops: float | None, devices: int
    ) -> None:
        self.per_sample = flops_per_sample if isinstance(flops_per_sample, float) else None
        self._to_count = flops_per_sample == AUTO
        self.peak_flops = peak_flops
        self.devices = devices

    def counting(self, samples: int) -> AbstractContextManager[None]:
        """Return the context around a step's forward and backward; the first step is counted.

        The forward is ``training_step``. Every other step runs under a shared no-op context."""
        if not self._to_count:
            return _NOTHING
        self._to_count = False
        return self._count(samples)

    @contextlib.contextmanager
    def _count(self, samples: int) -> Iterator[None]:
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with counter:
            yield
        # FlopCounterMode counts the operations it knows (matrix products, convolutions,
        # attention); a model without any has no figure rather than a figure of 0.
        total = counter.get_total_flops()
        if total > 0 and samples > 0:
            self.per_sample = total / samples

    def figures(self, samples_per_second: float) -> dict[str, float]:
        """Return ``flops_per_second`` and, where the peak is known, ``mfu``.

        ``flops_per_second`` is of all devices together; ``{}`` while the FLOPs per sample are
        unknown."""
        if self.per_sample is None or not math.isfinite(samples_per_second):
            return {}
        achieved = self.per_sample * samples_per_second
        figures = {"flops_per_second": achieved}
        if self.peak_flops is not None:
            figures["mfu"] = achieved / (self.peak_flops * self.devices)
        return figures


def peak_flops(
    accelerator: Any, device: Any, precision: str, declared: DevicePeak | None
) -> float | None:
    """Return one device's peak FLOPs per second for ``precision``, or None.

    The user's ``declared`` peak, else the plugin's ``device_peak``; None where neither knows (a
    hook that fails is warned about: the fit goes on without ``mfu``)."""
    peak = declared
    if peak is None:
        try:
            peak = accelerator.device_peak(device)
        except AccelctlError as exc:
            warn_user(f"no mfu for this fit: {exc}", PluginWarning)
            return None
    if peak is None:
        return None
    return peak.flops_for(peak_dtype(precision, peak))

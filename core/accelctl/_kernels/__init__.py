"""The kernels a device lacks: the error, the declaration, the CPU fallback, the translation.

accelctl's error for one (:class:`MissingKernelError`), what a plugin declares of them
(:class:`KernelGaps`), the CPU fallback ``ACCELCTL_CPU_FALLBACK=1`` turns on, and the translation
every training path asks for when an error stops it.

docs/missing-kernels.md is the user's page; docs/design/cpu-fallback.md says why it is built so.
"""

from __future__ import annotations

from .._contract.kernel_error import MissingKernelError
from .._contract.kernel_gaps import KernelGaps

__all__ = ["KernelGaps", "MissingKernelError"]

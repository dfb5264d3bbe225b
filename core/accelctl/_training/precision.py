"""The ``precision`` argument: full float32, or mixed precision through ``torch.autocast``."""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._contract.errors import PrecisionError

if TYPE_CHECKING:
    import torch

#: Accepted values of ``Trainer(precision=...)``, in the order messages list them.
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
#: Other spellings of the same settings (Lightning's names and the int 32).
_ALIASES = {"32-true": "32", "fp32": "32", "float32": "32"}
#: Common spellings that are not accepted, and the value the message suggests instead.
_NEAREST = {
    "16": "16-mixed",
    "fp16": "16-mixed",
    "float16": "16-mixed",
    "half": "16-mixed",
    "16-true": "16-mixed",
    "bf16": "bf16-mixed",
    "bfloat16": "bf16-mixed",
    "bf16-true": "bf16-mixed",
}


def parse_precision(precision: Any) -> str:
    """Normalise ``precision`` to one of :data:`PRECISIONS`.

    ``32`` (the int) and ``"32-true"`` mean ``"32"``; white space and case are ignored.

    :raises PrecisionError: for anything else, listing the accepted values and the nearest one.
    """
    key = ""  # neither an int nor a string: no spelling to match
    if isinstance(precision, int) and not isinstance(precision, bool):
        key = str(precision)
    elif isinstance(precision, str):
        key = precision.strip().lower()
    key = _ALIASES.get(key, key)
    if key in PRECISIONS:
        return key
    accepted = ", ".join(f'"{p}"' for p in PRECISIONS)
    near = _NEAREST.get(key) or next(
        iter(difflib.get_close_matches(key, PRECISIONS, n=1, cutoff=0.6)), None
    )
    hint = f' (did you mean "{near}"?)' if near else ""
    raise PrecisionError(
        f"precision={precision!r} is not accepted{hint}. Accepted: {accepted} "
        '("32": float32 throughout; "bf16-mixed" / "16-mixed": torch.autocast to bfloat16 / '
        "float16, float32 weights)"
    )


@dataclass(frozen=True)
class Precision:
    """How one process runs its forward passes and backward steps."""

    #: One of :data:`PRECISIONS`.
    name: str

    @property
    def mixed(self) -> bool:
        """True for the autocast settings."""
        return self.name != "32"

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        """A reusable context manager for the forward pass on ``device``.

        :raises PrecisionError: when torch has no autocast for ``device``'s type.
        """
        if not self.mixed:
            return contextlib.nullcontext()
        import torch

        available = getattr(torch.amp, "is_autocast_available", None)
        if available is not None and not available(device.type):
            raise PrecisionError(
                f"precision={self.name!r} needs torch.autocast on device type {device.type!r}, "
                f"which this torch ({torch.__version__}) does not support; use precision='32'"
            )
        dtype = torch.bfloat16 if self.name == "bf16-mixed" else torch.float16
        try:
            return torch.autocast(device_type=device.type, dtype=dtype)
        except RuntimeError as exc:  # e.g. a GPU without bfloat16
            raise PrecisionError(
                f"precision={self.name!r} is not supported on {device}: {exc}. "
                f"Use precision='32'"
                + (" or '16-mixed'" if self.name == "bf16-mixed" else " or 'bf16-mixed'")
            ) from exc

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler | None:
        """A gradient scaler for float16 (whose small gradients underflow), else None."""
        if self.name != "16-mixed":
            return None
        import torch

        return torch.amp.GradScaler(device=device.type)

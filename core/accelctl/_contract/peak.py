"""What a device can do at most: :class:`DevicePeak`, from the optional ``device_peak`` hook.

The Trainer divides the model FLOPs it achieves by these figures (times its devices) for ``mfu``,
model FLOPs utilisation. A plugin that cannot know its device's peak returns None: unknown, said
honestly, and no ``mfu`` is logged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._base.text import safe_repr
from .info import from_fields

#: The data types a peak is given for, by torch's names (``tf32``: float32 matrix products on
#: tensor cores, where torch allows them; ``float8``: either float8 format).
PEAK_DTYPES = ("float64", "float32", "tf32", "bfloat16", "float16", "float8", "int8")


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {safe_repr(value)}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number > 0, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class DevicePeak:
    """One device's peak: dense FLOPs per second by data type, and memory bandwidth.

    :param flops: data type (one of :data:`PEAK_DTYPES`) to FLOPs per second, dense (no
        structured sparsity), at the device's boost clock. Types the device has no figure for
        are left out.
    :param memory_bandwidth_bytes_per_second: the device memory's bandwidth; None: unknown.
    :param source: where the figures come from, for people (``"NVIDIA H100 SXM5 datasheet"``,
        ``"declared by the user"``).

    Checked on creation: a ``TypeError``/``ValueError`` names the field and what is accepted.
    """

    flops: Mapping[str, float] = field(default_factory=dict)
    memory_bandwidth_bytes_per_second: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.flops, Mapping):
            raise TypeError(
                f"flops must be a dict of data type to FLOPs per second, not "
                f"{type(self.flops).__name__}"
            )
        flops = {}
        for dtype, value in self.flops.items():
            if dtype not in PEAK_DTYPES:
                raise ValueError(
                    f"flops: unknown data type {safe_repr(dtype)}; accepted: "
                    f"{', '.join(PEAK_DTYPES)}"
                )
            flops[dtype] = _positive(value, f"flops[{dtype!r}]")
        object.__setattr__(self, "flops", flops)
        bandwidth = self.memory_bandwidth_bytes_per_second
        if bandwidth is not None:
            object.__setattr__(
                self,
                "memory_bandwidth_bytes_per_second",
                _positive(bandwidth, "memory_bandwidth_bytes_per_second"),
            )
        if not isinstance(self.source, str):
            raise TypeError(f"source must be a str, not {type(self.source).__name__}")

    @classmethod
    def coerce(cls, value: DevicePeak | Mapping[str, Any] | None) -> DevicePeak | None:
        """Check what the ``device_peak`` hook returned and make it a ``DevicePeak`` or None.

        Accepted: a ``DevicePeak``, a dict of its fields, or None (unknown); anything else is
        refused."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return from_fields(cls, value)
        raise TypeError(
            f"expected a DevicePeak, a dict of its fields, or None (unknown), not "
            f"{type(value).__name__}"
        )

    @classmethod
    def uniform(cls, flops: float, *, source: str = "") -> DevicePeak:
        """The same peak FLOPs per second for every data type (a user's single figure)."""
        return cls(dict.fromkeys(PEAK_DTYPES, flops), source=source)

    @classmethod
    def parse_flops(cls, text: str, *, source: str = "") -> DevicePeak:
        """Parse a peak from a declaration such as ``"bfloat16=2.4e12,float32=1.2e12"``.

        Or a bare number for every data type (``"1.5e12"``).

        :raises ValueError: naming the part that is not accepted, and the accepted forms.
        """
        forms = (
            "a number of FLOPs per second for every data type ('1.5e12'), or <dtype>=<number> "
            f"pairs separated by commas ('bfloat16=2.4e12,float32=1.2e12'; dtypes: "
            f"{', '.join(PEAK_DTYPES)})"
        )
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise ValueError(f"{text!r} declares no peak; give {forms}")
        try:
            if len(parts) == 1 and "=" not in parts[0]:
                return cls.uniform(float(parts[0]), source=source)
            flops = {}
            for part in parts:
                dtype, equals, number = part.partition("=")
                if not equals:
                    raise ValueError(f"{part!r} has no '='")
                flops[dtype.strip().lower()] = float(number)
            return cls(flops, source=source)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{text!r} is not accepted ({exc}); give {forms}") from None

    def flops_for(self, dtype: str) -> float | None:
        """Peak FLOPs per second for ``dtype`` (one of :data:`PEAK_DTYPES`); None: unknown."""
        return self.flops.get(dtype)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready plain data."""
        return {
            "flops": dict(self.flops),
            "memory_bandwidth_bytes_per_second": self.memory_bandwidth_bytes_per_second,
            "source": self.source,
        }

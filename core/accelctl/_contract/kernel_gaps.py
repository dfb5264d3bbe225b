"""What a plugin knows of the kernels its device lacks, and the names shown for operators.

:class:`KernelGaps`, from the optional ``kernel_gaps`` hook, and the names accelctl shows for
torch's operators.

An operator is named as torch's dispatcher names it, ``namespace::name`` with an optional
``.overload`` (``aten::convolution_overrideable``, ``aten::add_.Tensor``). torch's extension
points for a new device are the ``*_overrideable`` operators (:data:`OVERRIDEABLE`): composites
whose default kernel refuses every device but the CPU and CUDA, so a backend that registers none
lacks them; a user knows them by the operator they stand in for (``aten::convolution``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._base.text import safe_repr
from .info import from_fields

_OP_NAME = re.compile(r"[a-z_][a-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?")
_VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]*")


class ShownOp(NamedTuple):
    """The operator a user knows for a kernel, and the pass it runs in where its name says."""

    #: The operator (``"aten::convolution"``).
    op: str
    #: ``"forward"`` or ``"backward"``; None where the kernel's name does not say.
    phase: str | None


#: torch's ``*_overrideable`` operators -> the operator a user knows, and the pass it runs in.
OVERRIDEABLE: dict[str, ShownOp] = {
    "aten::convolution_overrideable": ShownOp("aten::convolution", "forward"),
    "aten::convolution_backward_overrideable": ShownOp("aten::convolution", "backward"),
    "aten::_scaled_dot_product_fused_attention_overrideable": ShownOp(
        "aten::scaled_dot_product_attention", "forward"
    ),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": ShownOp(
        "aten::scaled_dot_product_attention", "backward"
    ),
}


def is_op_name(name: object) -> bool:
    """True for ``namespace::name`` or ``namespace::name.overload``."""
    return isinstance(name, str) and _OP_NAME.fullmatch(name) is not None


def shown_op(kernel: str) -> ShownOp:
    """Return the operator a user knows for ``kernel``, and its pass where the name says.

    ``("aten::convolution", "backward")`` for ``aten::convolution_backward_overrideable``."""
    base = kernel.split(".", 1)[0]
    if base in OVERRIDEABLE:
        return OVERRIDEABLE[base]
    if base.endswith("_backward"):
        return ShownOp(base, "backward")
    return ShownOp(kernel, None)


def _op_names(value: Any, field: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(
            f"{field} must be a tuple or list of operator names, not {type(value).__name__}"
        )
    names: list[str] = []
    for item in value:
        if not is_op_name(item):
            raise ValueError(
                f"{field}: {safe_repr(item)} is not an operator name; give torch's "
                "'namespace::name' or 'namespace::name.overload' ('aten::convolution_overrideable')"
            )
        names.append(item)
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class KernelGaps:
    """What a plugin knows of its device's kernels, from the optional ``kernel_gaps`` hook.

    :param missing: operators the device lacks, or has only a placeholder kernel for (one that
        returns no result): accelctl stops with :class:`accelctl.MissingKernelError` at their
        first call, and with ``ACCELCTL_CPU_FALLBACK=1`` runs them on the CPU instead.
    :param never_fall_back: operators that must never run on the CPU in the device's place,
        even with ``ACCELCTL_CPU_FALLBACK=1`` (the vendor's choice: one whose CPU result would
        differ in a way that matters, one that must not leave the device).
    :param fallback_variable: torch's own switch that runs this device's missing kernels on
        the CPU, where torch has one (MPS: ``"PYTORCH_ENABLE_MPS_FALLBACK"``): accelctl's switch
        sets it instead of registering kernels of its own.
    :param note: where the list comes from, for people (``"torch_openreg's attention kernels
        are placeholders"``).
    :param partial: operators whose device kernel runs some dtypes only and raises for the
        others (torch_openreg's ``aten::abs``: float32 only): not stopped at their first call
        (the device runs its dtypes), but the device's error for another dtype, where it names
        the operator (``"Abs kernel only supports float type"``), becomes
        :class:`accelctl.MissingKernelError`; with ``ACCELCTL_CPU_FALLBACK=1`` every call of
        them runs on the CPU (a kernel cannot hand some dtypes back to the device's own).

    Names are torch's (``"aten::convolution_overrideable"``, ``"aten::add_.Tensor"``). Checked
    on creation: a ``TypeError``/``ValueError`` names the field and what is accepted.
    """

    missing: tuple[str, ...] = ()
    never_fall_back: tuple[str, ...] = ()
    fallback_variable: str | None = None
    note: str = ""
    partial: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "missing", _op_names(self.missing, "missing"))
        object.__setattr__(self, "partial", _op_names(self.partial, "partial"))
        object.__setattr__(
            self, "never_fall_back", _op_names(self.never_fall_back, "never_fall_back")
        )
        variable = self.fallback_variable
        if variable is not None and (
            not isinstance(variable, str) or _VARIABLE.fullmatch(variable) is None
        ):
            raise ValueError(
                f"fallback_variable {safe_repr(variable)} is not an environment variable's "
                "name (uppercase [A-Z0-9_], such as 'PYTORCH_ENABLE_MPS_FALLBACK'), or None"
            )
        if not isinstance(self.note, str):
            raise TypeError(f"note must be a str, not {type(self.note).__name__}")

    @classmethod
    def coerce(cls, value: KernelGaps | Mapping[str, Any] | None) -> KernelGaps:
        """Check what the ``kernel_gaps`` hook returned and make it a ``KernelGaps`` or None.

        Accepted: a ``KernelGaps``, a dict of its fields, or None (nothing known: no gaps
        declared); anything else is refused."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return from_fields(cls, value)
        raise TypeError(
            f"expected a KernelGaps, a dict of its fields, or None, not {type(value).__name__}"
        )

    @property
    def to_run_on_cpu(self) -> tuple[str, ...]:
        """Return the operators ``ACCELCTL_CPU_FALLBACK=1`` runs on the CPU by this declaration.

        :attr:`missing`, then :attr:`partial`."""
        return tuple(dict.fromkeys((*self.missing, *self.partial)))

    def allows_fallback(self, kernel: str) -> bool:
        """False where the plugin declares that ``kernel`` must never run on the CPU."""
        base = kernel.split(".", 1)[0]
        return not any(name in (kernel, base) for name in self.never_fall_back)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready plain data."""
        return {
            "missing": list(self.missing),
            "never_fall_back": list(self.never_fall_back),
            "fallback_variable": self.fallback_variable,
            "note": self.note,
            "partial": list(self.partial),
        }

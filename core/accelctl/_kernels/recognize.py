"""Which errors are a kernel the device lacks, and where the model called it.

Read only where an error already stopped the training, so nothing here costs a step anything.
The shapes, as torch 2.13 and its backends raise them (each seen on torch_openreg 0.0.1-0.0.3, or
quoted from torch's sources for MPS):

- the dispatcher finds no kernel for the device's dispatch key: ``Could not run 'aten::x' with
  arguments from the 'PrivateUse1' backend`` (any device key); with ``'CPU'`` while the model
  runs on another device, the device's own fallback sent it to the CPU, which lacks it too
  (``aten::_thnn_fused_lstm_cell``, what ``nn.LSTM`` calls off the CPU);
- an ``*_overrideable`` operator's default kernel: ``convolution_overrideable not implemented``,
  ``convolution_backward_overrideable: You are likely triggering this with tensor backend ...``;
- a ``"x" not implemented for 'PrivateUse1'`` check naming the device's key;
- MPS: ``The operator 'aten::x' is not currently implemented for the MPS device``;
- a backward kernel that left its gradients undefined: ``tensor does not have a device`` from the
  autograd engine, which names no operator: the graph of the loss names it (:func:`undefined_grad`).
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._contract.kernel_gaps import is_op_name, shown_op

if TYPE_CHECKING:
    from types import FrameType

    import torch


@dataclass(frozen=True)
class KernelFailure:
    """A kernel the device lacks, as an error showed it."""

    #: torch's name of the missing kernel (``aten::convolution_overrideable``).
    kernel: str
    #: ``"forward"``, ``"backward"``, or None where the error does not say.
    phase: str | None
    #: True where the CPU lacks it too (the device's own fallback tried the CPU).
    cpu_lacks_it: bool = False

    @property
    def op(self) -> str:
        """The operator a user knows (``aten::convolution``)."""
        return shown_op(self.kernel).op


_COULD_NOT_RUN = re.compile(r"Could not run '([\w:.]+)' with arguments from the '(\w+)' backend")
_OVERRIDEABLE = re.compile(
    r"\b(\w+_overrideable)(?: not implemented|: You are likely triggering this with tensor backend)"
)
_NOT_FOR_KEY = re.compile(r"\"(\w+)\" not implemented for '(\w+)'")
_MPS = re.compile(r"The operator '([\w:.]+)' is not currently implemented for the (\w+) device")
UNDEFINED_GRADIENT = "tensor does not have a device"


def _is_device_key(key: str, device_type: str) -> bool:
    """Say whether ``key`` is a dispatch key of the model's device.

    ``PrivateUse1`` (and its sparse/quantized forms) for an out-of-tree backend, the device type's
    own key (``XPU``, ``MPS``, ``HPU``) else."""
    return key.endswith("PrivateUse1") or key.lower().endswith(device_type.lower())


def recognize(exc: BaseException, device_type: str) -> KernelFailure | None:
    """Return the missing kernel ``exc`` shows, on a model running on ``device_type``, or None.

    None where ``exc`` is another error (a CPU model's errors never are: the CPU is the floor)."""
    if device_type == "cpu" or not isinstance(exc, RuntimeError):  # NotImplementedError too
        return None
    text = str(exc)
    found = _COULD_NOT_RUN.search(text)
    if found is not None:
        kernel, key = found.groups()
        if key == "CPU":
            return KernelFailure(kernel, shown_op(kernel).phase, cpu_lacks_it=True)
        if _is_device_key(key, device_type):
            return KernelFailure(kernel, shown_op(kernel).phase)
        return None
    found = _OVERRIDEABLE.search(text)
    if found is not None:
        kernel = f"aten::{found.group(1)}"
        return KernelFailure(kernel, shown_op(kernel).phase)
    found = _MPS.search(text)
    if found is not None and is_op_name(found.group(1)):
        return KernelFailure(found.group(1), shown_op(found.group(1)).phase)
    found = _NOT_FOR_KEY.search(text)
    if found is not None and _is_device_key(found.group(2), device_type):
        kernel = f"aten::{found.group(1)}"
        return KernelFailure(kernel, shown_op(kernel).phase)
    return None


def partial_kernel(exc: BaseException, partial: tuple[str, ...]) -> KernelFailure | None:
    """Return the kernel behind a device's own refusal of a dtype, or None.

    For an operator the plugin declares it runs in some dtypes only (``KernelGaps.partial``): its
    error names the operator as a word (torch_openreg 0.0.3's ``abs``: ``Abs kernel only supports
    float type``). None where ``exc`` names none of them."""
    if not isinstance(exc, RuntimeError):  # NotImplementedError too
        return None
    text = str(exc)
    for kernel in partial:
        name = kernel.split("::", 1)[1].split(".", 1)[0]
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text, re.IGNORECASE):
            return KernelFailure(kernel, shown_op(kernel).phase)
    return None


def undefined_grad(exc: BaseException, loss: Any = None) -> KernelFailure | None:
    """Return the kernel behind the autograd engine's ``tensor does not have a device``, or None.

    A backward node of ``loss``'s graph named for one of torch's ``*_overrideable`` operators (a
    device's placeholder kernel leaves its gradients undefined). None where ``exc`` is not that
    error or the graph names no such node. ``loss`` None: the tensor whose ``backward()`` raised,
    where the traceback shows it (:func:`backward_root`)."""
    if not isinstance(exc, RuntimeError) or UNDEFINED_GRADIENT not in str(exc):
        return None
    grad_fn = getattr(loss if loss is not None else backward_root(exc), "grad_fn", None)
    seen: set[int] = set()
    pending = [grad_fn] if grad_fn is not None else []
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        name = type(node).__name__
        if "Overrideable" in name:
            return KernelFailure(f"aten::{_overrideable_op(name)}_backward", "backward")
        pending.extend(child for child, _ in node.next_functions if child is not None)
    return None


def backward_root(exc: BaseException) -> Any:
    """Return the tensor whose ``backward()`` raised ``exc``, or None.

    The ``self`` of torch's ``Tensor.backward`` on its traceback (a framework's training step calls
    it on a loss the caller of the step never holds); None where it is not there."""
    import torch

    for frame, _ in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        if code.co_name == "backward" and code.co_filename.endswith("_tensor.py"):
            tensor = frame.f_locals.get("self")
            if isinstance(tensor, torch.Tensor):
                return tensor
    return None


def _overrideable_op(node_name: str) -> str:
    """Return the overrideable operator that a backward node's name stands for.

    ``ScaledDotProductFusedAttentionOverrideableBackward0`` ->
    ``_scaled_dot_product_fused_attention_overrideable`` (torch's names: every overrideable op
    but convolution's starts with an underscore)."""
    stem = re.sub(r"Backward\d*$", "", node_name)
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", stem).lower()
    return snake if snake.startswith("convolution") else f"_{snake}"


def phase_of(exc: BaseException) -> str | None:
    """Say whether the error came from the ``"forward"`` or the ``"backward"`` pass, or None.

    Backward: it came out of ``Tensor.backward``/``torch.autograd``; forward: a module's
    ``forward`` is on its traceback."""
    forward = False
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        if code.co_name in ("_engine_run_backward", "backward", "grad") and (
            "autograd" in code.co_filename or code.co_filename.endswith("_tensor.py")
        ):
            return "backward"
        forward = forward or (code.co_name == "forward" and _module_of(frame) is not None)
    return "forward" if forward else None


def calling_layer(exc: BaseException, model: Any = None) -> str | None:
    """Name the innermost layer whose ``forward`` the error came out of, or None.

    ``"Conv2d at features.0"``: the module named by its path in ``model`` where ``model`` holds it.
    None where no module's forward is on the traceback (an error in the backward pass, raised by the
    engine)."""
    innermost = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name == "forward":
            module = _module_of(frame)
            if module is not None:
                innermost = module
    if innermost is None:
        return None
    kind = type(innermost).__name__
    path = _path_in(model, innermost)
    if path is None:
        return kind
    return f"{kind} at {path}" if path else f"{kind} (the model itself)"


def _module_of(frame: FrameType) -> torch.nn.Module | None:
    import torch

    code = frame.f_code
    if code.co_argcount < 1:
        return None
    module = frame.f_locals.get(code.co_varnames[0])  # a method's first argument, its self
    return module if isinstance(module, torch.nn.Module) else None


def _path_in(model: Any, module: torch.nn.Module) -> str | None:
    """Return ``module``'s name in ``model.named_modules()``, or None.

    "" for the model itself. Looks through the wrappers a strategy adds (DDP's ``module``)."""
    import torch

    wrappers: list[
        torch.nn.Module
    ] = []  # the model, then what it wraps: searched innermost first (no "module.")
    while isinstance(model, torch.nn.Module) and len(wrappers) < 4:
        wrappers.append(model)
        model = getattr(model, "module", None)
    for wrapper in reversed(wrappers):
        for name, candidate in wrapper.named_modules():
            if candidate is module:
                return str(name)
    return None

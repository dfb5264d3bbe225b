"""``ACCELCTL_CPU_FALLBACK=1`` on a PrivateUse1 backend: the kernels it lacks run on the CPU.

What is registered, through ``torch.library`` (docs/design/cpu-fallback.md says why each):

- torch's ``*_overrideable`` operators the backend has no kernel for (convolution, and the
  fused attention where the plugin declares the backend's kernel a placeholder): the operator
  they stand in for runs on CPU copies of the inputs, under the device's autograd key, so the
  CPU's own backward runs too (the CPU's kernels, forward and backward: a CPU run's numbers);
- each operator the plugin declares missing (``kernel_gaps``): the same operator on the CPU;
- where the backend has no fallback of its own (torch_openreg has one), a fallback for every
  operator it lacks, as ``PYTORCH_ENABLE_MPS_FALLBACK`` does for MPS.

An operator run on the CPU gets CPU copies of its device tensors; its results are copied to the
device of its first device input, except those that alias an input (in-place and ``out=``
variants), whose new values are copied into the device tensors the caller holds, so a view the
caller made stays a view of what it changed. An operator that returns a new view of an input
cannot be run so, and stays missing. Each operator that runs on the CPU is named once in a
warning (in the process of rank 0), and every call is counted (:attr:`CPUFallback.calls`).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._contract.errors import CPUFallbackWarning, warn_user
from .._contract.kernel_error import MissingKernelError
from .._contract.kernel_gaps import OVERRIDEABLE, KernelGaps, ShownOp, shown_op

if TYPE_CHECKING:
    import torch

#: An overrideable operator -> (what computes it on the CPU, the dispatch keys it is registered
#: for). torch calls the convolution's below its own autograd formula (``aten::convolution``'s),
#: whose backward calls the backward one: both run the CPU's kernels. The fused attention is
#: called with autograd still ahead: registered under the device's autograd key too, its CPU
#: computation records the CPU's own backward (and the dropout mask a CPU run draws).
_CPU_EQUIVALENT: dict[str, tuple[str, tuple[str, ...]]] = {
    "aten::convolution_overrideable": ("convolution", ("PrivateUse1",)),
    "aten::convolution_backward_overrideable": ("convolution_backward", ("PrivateUse1",)),
    "aten::_scaled_dot_product_fused_attention_overrideable": (
        "attention",
        ("AutogradPrivateUse1", "PrivateUse1"),
    ),
}
#: What moves tensors between the CPU and the device: never run on the CPU (it would recurse).
_NEVER = ("aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize")


class CPUFallback:
    """The CPU kernels registered for one PrivateUse1 device type, and the calls they ran.

    Registered in this process by :meth:`install`; the registrations last as long as this
    object."""

    def __init__(self, device_type: str, gaps: KernelGaps, *, warn: bool) -> None:
        self.device_type = device_type
        self.gaps = gaps
        self.warn = warn
        #: Calls that ran on the CPU, by operator (torch's name).
        self.calls: Counter[str] = Counter()
        #: The operators given a CPU kernel of accelctl's (torch's names).
        self.registered: list[str] = []
        #: True where accelctl registered a fallback for every operator the backend lacks.
        self.backend_fallback = False
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._libraries: list[Any] = []
        self._moving = threading.local()

    @property
    def total_calls(self) -> int:
        """Every call that ran on the CPU so far."""
        with self._lock:
            return sum(self.calls.values())

    # -- registration -------------------------------------------------------------------------

    def install(self) -> None:
        """Register the CPU kernels (see the module's docstring); once per object."""
        aten = library("aten")
        self._libraries.append(aten)
        with _quietly():  # torch warns when a kernel replaces the backend's own
            for kernel, (equivalent, keys) in _CPU_EQUIVALENT.items():
                if not _replaces(kernel, self.gaps):
                    continue
                name = kernel.split("::", 1)[1]
                function = self._cpu_equivalent(kernel, equivalent)
                for key in keys:
                    aten.impl(name, function, key)
                self.registered.append(kernel)
            for kernel in self.gaps.to_run_on_cpu:
                if kernel in _CPU_EQUIVALENT or kernel in OVERRIDEABLE:
                    continue  # its forward's CPU equivalent covers its backward
                if _per_op_refusal(kernel, self.gaps) is not None:
                    continue
                self._library(kernel).impl(
                    kernel.split("::", 1)[1], self._per_op(_overload(kernel)), "PrivateUse1"
                )
                self.registered.append(kernel)
        if not _has_backend_fallback():
            everything = library("_")
            everything.fallback(self._boxed, "PrivateUse1")
            self._libraries.append(everything)
            self.backend_fallback = True

    def _library(self, kernel: str) -> Any:
        made = library(kernel.split("::", 1)[0])
        self._libraries.append(made)
        return made

    # -- what runs --------------------------------------------------------------------------

    def _count(self, kernel: str, device: torch.device | None) -> None:
        op = shown_op(kernel).op
        with self._lock:
            first = op not in self._warned
            self._warned.add(op)
            self.calls[kernel] += 1
        if first and self.warn:
            import torch

            where = str(device) if device is not None else self.device_type
            said = f"{op} has no kernel for {where}: it runs"
            if kernel.split(".", 1)[0] in self.gaps.partial or kernel in self.gaps.partial:
                said = f"{op} runs some dtypes only on {where}: every call of it runs"
            warn_user(
                f"{said} on the CPU ({_SWITCH}), its inputs and "
                "results copied at each call (slower than on the device; the run's "
                "cpu_fallback_calls counts the calls)",
                CPUFallbackWarning,
                also_skip=(os.path.dirname(torch.__file__) + os.sep,),
            )

    def _cpu_equivalent(self, kernel: str, equivalent: str) -> Callable[..., Any]:
        if equivalent == "convolution":

            def convolution(
                input: torch.Tensor,
                weight: torch.Tensor,
                bias: torch.Tensor | None,
                *options: Any,
            ) -> torch.Tensor:
                import torch

                self._count(kernel, input.device)
                with self._on_cpu(kernel):
                    cpu: torch.Tensor = torch.ops.aten.convolution.default(
                        input.cpu(), weight.cpu(), None if bias is None else bias.cpu(), *options
                    )
                    return cpu.to(input.device)

            return convolution

        if equivalent == "convolution_backward":

            def convolution_backward(
                grad_output: torch.Tensor,
                input: torch.Tensor,
                weight: torch.Tensor,
                stride: Any,
                padding: Any,
                dilation: Any,
                transposed: bool,
                output_padding: Any,
                groups: int,
                output_mask: Any,
            ) -> tuple[Any, ...]:
                import torch

                self._count(kernel, input.device)
                device = input.device
                # The bias's size, which only the CPU's operator asks for: the output channels.
                channels = weight.shape[1] * groups if transposed else weight.shape[0]
                with self._on_cpu(kernel):
                    grads = torch.ops.aten.convolution_backward.default(
                        grad_output.cpu(),
                        input.cpu(),
                        weight.cpu(),
                        [channels],
                        stride,
                        padding,
                        dilation,
                        transposed,
                        output_padding,
                        groups,
                        output_mask,
                    )
                    return tuple(None if g is None else g.to(device) for g in grads)

            return convolution_backward

        def attention(
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            attn_bias: torch.Tensor | None = None,
            dropout_p: float = 0.0,
            is_causal: bool = False,
            return_debug_mask: bool = False,
            *,
            scale: float | None = None,
        ) -> tuple[Any, ...]:
            import torch

            self._count(kernel, query.device)
            device = query.device
            with self._on_cpu(kernel):
                mask = None if attn_bias is None else attn_bias.cpu()
                cpu = torch.nn.functional.scaled_dot_product_attention(
                    query.cpu(),
                    key.cpu(),
                    value.cpu(),
                    attn_mask=mask,
                    dropout_p=dropout_p,
                    is_causal=is_causal,
                    scale=scale,
                )
                output = cpu.to(device)
            # The fused kernel's other results feed only its own backward, which autograd
            # replaced with the CPU's: empty, as a kernel without them returns them.
            empty = torch.empty(0, device=device)
            return output, empty, empty, empty, 0, 0, empty, empty, empty

        return attention

    def _per_op(self, op: Any) -> Callable[..., Any]:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            return self._run(op, args, kwargs)

        return kernel

    def _boxed(self, op: Any, *args: Any, **kwargs: Any) -> Any:
        kernel = _name_of(op)
        why = _per_op_refusal(kernel, self.gaps, op)
        if why is not None:
            raise self._still_missing(kernel, args, kwargs, why)
        return self._run(op, args, kwargs)

    def _run(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``op`` on CPU copies and put the results back on the device.

        They are written into the tensors that in-place and ``out=`` variants write."""

        kernel = _name_of(op)
        moved: list[torch.device] = []
        with self._on_cpu(kernel):
            cpu_args = tuple(self._to_cpu(value, moved) for value in args)
            cpu_kwargs = {name: self._to_cpu(value, moved) for name, value in kwargs.items()}
        device = moved[0] if moved else None
        self._count(kernel, device)
        result = op(*cpu_args, **cpu_kwargs)
        schema = op._schema
        written: dict[str, Any] = {}
        with self._on_cpu(kernel):
            for index, argument in enumerate(schema.arguments):
                alias = argument.alias_info
                if alias is None or not alias.is_write:
                    continue
                if argument.name in kwargs:
                    original, new = kwargs[argument.name], cpu_kwargs[argument.name]
                elif index < len(args):
                    original, new = args[index], cpu_args[index]
                else:
                    continue
                _copy_into(original, new)
                for name in alias.before_set:
                    written[name] = original
            returns = schema.returns
            if len(returns) == 1:
                return self._back(result, returns[0], written, device)
            return tuple(
                self._back(value, ret, written, device)
                for value, ret in zip(result, returns, strict=True)
            )

    def _to_cpu(self, value: Any, moved: list[torch.device]) -> Any:
        import torch

        if isinstance(value, torch.Tensor) and value.device.type == self.device_type:
            moved.append(value.device)
            return value.cpu()
        if isinstance(value, torch.device) and value.type == self.device_type:
            moved.append(value)
            return torch.device("cpu")
        if isinstance(value, (list, tuple)):
            return type(value)(self._to_cpu(item, moved) for item in value)
        return value

    def _back(self, value: Any, ret: Any, written: dict[str, Any], device: Any) -> Any:
        import torch

        alias = ret.alias_info
        if alias is not None:
            for name in alias.before_set:
                if name in written:
                    return written[name]  # the caller's own tensor, now holding the result
        if device is None:
            return value
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if isinstance(value, (list, tuple)):
            return type(value)(self._back(item, _NoAlias, written, device) for item in value)
        return value

    @contextmanager
    def _on_cpu(self, kernel: str) -> Iterator[None]:
        """Stop a missing kernel needed to move tensors as missing, while tensors move.

        Between the CPU and the device: such a kernel would call back here for ever."""
        if getattr(self._moving, "kernel", None) is not None:
            raise MissingKernelError(
                op=shown_op(kernel).op,
                kernel=kernel,
                device=self.device_type,
                fallback="moving tensors between the CPU and the device needs it",
            )
        self._moving.kernel = kernel
        try:
            yield
        finally:
            self._moving.kernel = None

    def _still_missing(
        self, kernel: str, args: tuple[Any, ...], kwargs: dict[str, Any], why: str
    ) -> MissingKernelError:
        moved: list[Any] = []
        for value in (*args, *kwargs.values()):
            self._to_device_of(value, moved)
        return MissingKernelError(
            op=shown_op(kernel).op,
            kernel=kernel,
            device=str(moved[0]) if moved else self.device_type,
            fallback=why,
        )

    def _to_device_of(self, value: Any, found: list[Any]) -> None:
        import torch

        if isinstance(value, torch.Tensor) and value.device.type == self.device_type:
            found.append(value.device)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._to_device_of(item, found)


_SWITCH = "ACCELCTL_CPU_FALLBACK=1"


class _NoAlias:
    """A return without alias information (an element of a returned list)."""

    alias_info = None


def fallback_refusal(kernel: str, gaps: KernelGaps) -> str | None:
    """Say why :class:`CPUFallback` would not run ``kernel`` on the CPU; None where it would.

    ``kernel`` is torch's name. For this process's PrivateUse1 backend, by the rules
    :meth:`CPUFallback.install` and its fallback for every operator apply. For the capability
    matrix, before any job."""
    if not gaps.allows_fallback(kernel):
        return _never(kernel)
    if kernel in _CPU_EQUIVALENT:
        return None if _replaces(kernel, gaps) else _OWN_KERNEL
    if kernel in OVERRIDEABLE:  # a backward: the CPU's runs where its forward runs on the CPU
        op = OVERRIDEABLE[kernel].op
        forward = next(k for k in _CPU_EQUIVALENT if OVERRIDEABLE.get(k) == ShownOp(op, "forward"))
        why = fallback_refusal(forward, gaps)
        return None if why is None else f"its forward, {forward}, stays on the device: {why}"
    why = _per_op_refusal(kernel, gaps)
    if why is not None or kernel in gaps.to_run_on_cpu:
        return why
    if _has_own_kernel(kernel):
        return _OWN_KERNEL
    if _has_backend_fallback():
        return "the backend's own fallback for missing kernels runs it in accelctl's place"
    return None


_OWN_KERNEL = (
    "the backend's own kernel runs in its place; a plugin that declares it in kernel_gaps' "
    "missing gets the CPU's"
)


def _never(kernel: str) -> str:
    return f"the plugin declares that {kernel} must never run there"


def _replaces(kernel: str, gaps: KernelGaps) -> bool:
    """Say whether an overrideable operator gets accelctl's CPU kernel.

    It does where the backend has none of its own, or the plugin declares its own a
    placeholder, and the plugin allows it."""
    if not gaps.allows_fallback(kernel):
        return False
    return kernel in gaps.missing or not _has_own_kernel(kernel)


def _per_op_refusal(kernel: str, gaps: KernelGaps, op: Any = None) -> str | None:
    """Say why ``kernel`` cannot run on CPU copies of its inputs; None where it can.

    One call at a time. ``op``: its ``OpOverload``, looked up by name where not given."""
    if not gaps.allows_fallback(kernel):
        return _never(kernel)
    if kernel.split(".")[0] in _NEVER:
        return "it moves tensors between the CPU and the device"
    op = op if op is not None else _overload(kernel)
    if op is None:
        return f"torch has no operator {kernel}"
    if _returns_a_view(op):
        return "it returns a view of the device's memory"
    return None


def library(namespace: str) -> Any:
    """Return a ``torch.library.Library`` adding kernels to ``namespace``'s operators.

    ``"_"``: a fallback for every operator. Its kernels last as long as it does."""
    from torch.library import Library

    return Library(namespace, "IMPL")  # type: ignore[no-untyped-call]


def _copy_into(original: Any, new: Any) -> None:
    import torch

    if isinstance(original, torch.Tensor) and isinstance(new, torch.Tensor):
        if original is not new:
            original.copy_(new)
    elif isinstance(original, (list, tuple)) and isinstance(new, (list, tuple)):
        for item, value in zip(original, new, strict=True):
            _copy_into(item, value)


def _name_of(op: Any) -> str:
    """``aten::add_.Tensor`` for an ``OpOverload`` (``aten::add_`` for its default)."""
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _overload(kernel: str) -> Any:
    """torch's ``OpOverload`` for ``namespace::name[.overload]``; None where there is none."""
    import torch

    namespace, _, rest = kernel.partition("::")
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None


def _returns_a_view(op: Any) -> bool:
    """True for an operator returning a new alias of an input (a view): copies cannot be one."""
    schema = op._schema
    written = {
        name
        for argument in schema.arguments
        if argument.alias_info is not None and argument.alias_info.is_write
        for name in argument.alias_info.before_set
    }
    return any(
        ret.alias_info is not None and not (set(ret.alias_info.before_set) & written)
        for ret in schema.returns
    )


def _has_own_kernel(kernel: str) -> bool:
    """Say whether the backend registered a kernel of its own for ``kernel``.

    Read from the dispatcher's table; the default composite kernel of an overrideable operator
    does not count."""
    import torch

    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(kernel, "PrivateUse1"))


def _has_backend_fallback() -> bool:
    """True where the backend registered a fallback for every operator it lacks."""
    import torch

    return bool(torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.PrivateUse1))


@contextmanager
def _quietly() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel")
        warnings.filterwarnings("ignore", message=".*Warning only once for all operators")
        yield

"""The capability matrix's ``kernels`` row: each case run on the device and on the CPU.

The cases are :data:`.cases.CASES`, run forward and backward (an optimizer's steps); what the
device lacks is named.

A case's pass on the device is, against the CPU's:

- ``missing``: it raised (the kernel the error names where it names one, :mod:`.recognize`);
- ``wrong-result``: it gave another result than the CPU's beyond what the dtype allows
  (:mod:`.compare`): a placeholder kernel, or a wrong one;
- ``wrong-dtype``: under bfloat16 autocast, a result of an operator every autocast policy
  runs in bfloat16 (:data:`.cases.CAST_DOWN`) in another dtype than the CPU's: the device's
  autocast does not cast it.

Where the forward is missing, the backward is probed through the backward operator alone where
the case has one (convolution), else not at all. For each finding, whether
``ACCELCTL_CPU_FALLBACK=1`` would run the kernel on the CPU comes from the rules the fallback
applies (:func:`.setup.fallback_refusal_on`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._base.text import FIELD_LIMIT, clean, describe_exception
from .._contract.kernel_gaps import OVERRIDEABLE, KernelGaps, shown_op
from .cases import CASES, CAST_DOWN, KernelCase, Phase
from .compare import difference
from .recognize import KernelFailure, recognize, undefined_grad

if TYPE_CHECKING:
    import torch

State = Literal["missing", "wrong-result", "wrong-dtype"]


@dataclass(frozen=True)
class MissingKernel:
    """A kernel the device lacks or has wrong, as the ``kernels`` row names it.

    For the common layers: one per operator, pass and state, with the cases that showed it.

    ``op``: the operator as a user knows it (``aten::convolution``, or the optimizer's call);
    ``kernel``: torch's name of the kernel where the device's error or run named one
    (``aten::convolution_overrideable``); ``seen``: what the first of ``cases`` saw;
    ``fallback``: True where ``ACCELCTL_CPU_FALLBACK=1`` runs it on the CPU, else
    ``why_no_fallback`` says why not.
    """

    op: str
    phase: Phase
    state: State
    seen: str
    cases: tuple[str, ...]
    kernel: str | None = None
    fallback: bool = False
    why_no_fallback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as the row's ``missing_kernels`` lists it."""
        return {
            "op": self.op,
            "kernel": self.kernel,
            "phase": self.phase,
            "state": self.state,
            "seen": self.seen,
            "cases": list(self.cases),
            "fallback": self.fallback,
            "why_no_fallback": self.why_no_fallback,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MissingKernel:
        """The entry :meth:`to_dict` wrote (the probe process's message)."""
        kernel, why = data.get("kernel"), data.get("why_no_fallback")
        return cls(
            op=str(data["op"]),
            phase=data["phase"],
            state=data["state"],
            seen=str(data["seen"]),
            cases=tuple(str(case) for case in data.get("cases", ())),
            kernel=None if kernel is None else str(kernel),
            fallback=bool(data.get("fallback")),
            why_no_fallback=None if why is None else str(why),
        )


@dataclass(frozen=True)
class KernelsProbed:
    """What :func:`probe_kernels` found: the cases run and what they showed missing."""

    device: str
    cases: tuple[str, ...]
    missing: tuple[MissingKernel, ...] = field(default=())

    @property
    def reason(self) -> str:
        """The row's reason: all present, or the operators missing and what the fallback does."""
        if not self.missing:
            return (
                f"all {len(self.cases)} cases (the layers and optimizer steps of a small CNN and "
                f"a GPT-2 block, in float32 and under bfloat16 autocast, forward and backward) "
                f"ran on {self.device} as on the CPU"
            )
        by_op: dict[str, list[str]] = {}
        for found in self.missing:
            what = found.phase if found.state == "missing" else f"{found.phase}: {found.state}"
            by_op.setdefault(found.op, []).append(what)
        listed = ", ".join(f"{op} ({', '.join(how)})" for op, how in by_op.items())
        covered = [found for found in self.missing if found.fallback]
        if len(covered) == len(self.missing):
            fallback = "ACCELCTL_CPU_FALLBACK=1 runs all of them on the CPU"
        elif not covered:
            fallback = "ACCELCTL_CPU_FALLBACK=1 runs none of them on the CPU"
        else:
            fallback = (
                f"ACCELCTL_CPU_FALLBACK=1 runs {len(covered)} of the {len(self.missing)} on the CPU"
            )
        return f"missing or wrong on {self.device}: {listed}; {fallback}"


@dataclass(frozen=True)
class _Finding:
    case: KernelCase
    phase: Phase
    state: State
    seen: str
    kernel: str | None
    op: str
    cpu_lacks_it: bool = False


def probe_kernels(
    device: torch.device, gaps: KernelGaps, cases: Sequence[KernelCase] = CASES
) -> KernelsProbed:
    """Run ``cases`` on ``device`` and on the CPU and name what the device lacks.

    See the module's docstring. ``gaps``: what the plugin declares, for the fallback's verdicts
    and to name a placeholder's kernel."""
    findings = [found for case in cases for found in _probe_case(case, device, gaps)]
    grouped: dict[tuple[str, str | None, Phase, State], list[_Finding]] = {}
    for found in findings:
        grouped.setdefault((found.op, found.kernel, found.phase, found.state), []).append(found)
    missing = []
    for (op, kernel, _, state), same in grouped.items():
        lacks = any(found.cpu_lacks_it for found in same)
        why = why_no_fallback(device.type, gaps, kernel, state, cpu_lacks_it=lacks)
        first = same[0]
        missing.append(
            MissingKernel(
                op=op,
                phase=first.phase,
                state=first.state,
                seen=first.seen,
                cases=tuple(found.case.name for found in same),
                kernel=kernel,
                fallback=why is None,
                why_no_fallback=why,
            )
        )
    return KernelsProbed(str(device), tuple(case.name for case in cases), tuple(missing))


def why_no_fallback(
    device_type: str,
    gaps: KernelGaps,
    kernel: str | None,
    state: State,
    *,
    cpu_lacks_it: bool = False,
) -> str | None:
    """Say why ``ACCELCTL_CPU_FALLBACK=1`` would not make a finding go away; None where it would.

    The finding: on ``device_type``, ``kernel`` (torch's name; None where nothing named it) found
    ``state``. It goes away where the fallback runs it on the CPU
    (:func:`.setup.fallback_refusal_on`'s rules)."""
    from .setup import fallback_refusal_on

    if device_type == "cpu":
        return fallback_refusal_on(device_type, kernel or "", gaps)
    if state == "wrong-dtype":
        return (
            "the device's autocast does not cast it to bfloat16: an autocast rule, not a "
            "kernel, which the fallback does not add"
        )
    if cpu_lacks_it:
        return "the CPU has no such kernel either"
    if kernel is not None:
        return fallback_refusal_on(device_type, kernel, gaps)
    if state == "missing":
        return "the error names no kernel, so accelctl cannot tell which to run on the CPU"
    return (
        "the device's own kernel gave it, and nothing names which: the fallback replaces only "
        "kernels the device lacks or its plugin declares missing (kernel_gaps)"
    )


def _probe_case(case: KernelCase, device: torch.device, gaps: KernelGaps) -> list[_Finding]:
    """The findings of one case: none where the device did as the CPU did."""
    import torch

    generator = torch.Generator().manual_seed(0)
    on_cpu = case.make(generator)
    on_device = tuple(_to(value, device) for value in on_cpu)
    cpu_result = forward(case, on_cpu, "cpu")
    first = cpu_result[0] if isinstance(cpu_result, tuple) and not case.step else cpu_result
    seed = None if case.step else torch.randn(first.shape, generator=generator).to(first.dtype)

    def finding(
        phase: Phase, state: State, seen: str, kernel: KernelFailure | str | None
    ) -> _Finding:
        lacks = isinstance(kernel, KernelFailure) and kernel.cpu_lacks_it
        name = kernel.kernel if isinstance(kernel, KernelFailure) else kernel
        name = None if state == "wrong-dtype" else name  # autocast's rule, not a kernel
        op = shown_op(name).op if name is not None and state == "missing" else case.op
        return _Finding(case, phase, state, clean(seen, FIELD_LIMIT), name, op, lacks)

    opening: Phase = "step" if case.step else "forward"
    with _recorded() as ran:
        try:
            result = forward(case, on_device, device.type)
        except Exception as exc:
            found = [finding(opening, "missing", describe_exception(exc), _kernel_of(exc, device))]
            if case.backward_alone is not None and seed is not None:
                found += _backward_alone(case, on_device, seed, device, finding)
            return found
    found = []
    if case.judge is not None:
        wrong = _judged(case, on_device, result)
    else:
        wrong = difference(result, cpu_result, dtypes=not case.autocast or case.op in CAST_DOWN)
    if wrong is not None:
        cast = case.autocast and _dtypes(result) != _dtypes(cpu_result)
        state: State = "wrong-dtype" if cast else "wrong-result"
        found.append(finding(opening, state, wrong, _named(ran, gaps)))
    if case.step or seed is None:
        return found
    device_first = result[0] if isinstance(result, tuple) else result
    with _recorded() as ran:
        loss = None
        try:
            loss = weighted_loss(result, seed)
            loss.backward()  # type: ignore[no-untyped-call]
        except Exception as exc:  # the loss's graph names what the engine's error does not
            kernel = _kernel_of(exc, device, loss)
            return [*found, finding("backward", "missing", describe_exception(exc), kernel)]
    weighted_loss(cpu_result, seed).backward()  # type: ignore[no-untyped-call]
    grads = [value.grad for value in on_device if value.requires_grad]
    if case.judge is not None:
        wrong = case.judge(_cpu(on_device), _cpu(device_first), _cpu(grads), seed)
    else:
        expected = [value.grad for value in on_cpu if value.requires_grad]
        wrong = difference(grads, expected, dtypes=not case.autocast)
    if wrong is not None:
        found.append(finding("backward", "wrong-result", wrong, _named(ran, gaps)))
    return found


def _dtypes(result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return [dtype for item in result for dtype in _dtypes(item)]
    return [getattr(result, "dtype", None)]


def forward(case: KernelCase, inputs: tuple[Any, ...], device_type: str) -> Any:
    """``case``'s forward (or optimizer steps) on ``inputs``, under autocast where it asks."""
    import torch

    context = torch.autocast(device_type, dtype=torch.bfloat16) if case.autocast else nullcontext()
    with context:
        return case.run(*inputs)


def weighted_loss(result: Any, seed: torch.Tensor) -> torch.Tensor:
    """Return the loss a case's backward starts from: ``result`` weighted by ``seed`` and summed.

    For a tuple, its first element."""
    first = result[0] if isinstance(result, tuple) else result
    loss: torch.Tensor = (first * seed.to(first.device, first.dtype)).sum()
    return loss


def _judged(case: KernelCase, inputs: tuple[Any, ...], result: Any) -> str | None:
    assert case.judge is not None
    return case.judge(_cpu(inputs), _cpu(result))


def _backward_alone(
    case: KernelCase,
    inputs: tuple[Any, ...],
    seed: Any,
    device: torch.device,
    finding: Callable[[Phase, State, str, KernelFailure | str | None], _Finding],
) -> list[_Finding]:
    """Call the backward operator alone on the device and on the CPU, and compare.

    Done where the forward is missing."""
    assert case.backward_alone is not None
    detached = tuple(value.detach() for value in inputs)
    try:
        result = case.backward_alone(*detached, seed.to(device))
    except Exception as exc:
        return [finding("backward", "missing", describe_exception(exc), _kernel_of(exc, device))]
    expected = case.backward_alone(*_cpu(detached), seed)
    wrong = difference(result, expected)
    return [] if wrong is None else [finding("backward", "wrong-result", wrong, None)]


def _kernel_of(exc: BaseException, device: torch.device, loss: Any = None) -> KernelFailure | None:
    """Return the kernel that ``exc`` shows missing.

    Or the loss's graph shows it, for the autograd engine's undefined gradient."""
    failure = recognize(exc, device.type)
    if failure is None and loss is not None:
        failure = undefined_grad(exc, loss)
    return failure


def _named(ran: list[str], gaps: KernelGaps) -> str | None:
    """Return the kernel a wrong result is put down to, or None.

    The first the device ran that the plugin declares missing, or that is one of torch's
    overrideable operators; None where none is."""
    for kernel in ran:
        if kernel in gaps.missing or kernel in OVERRIDEABLE:
            return kernel
    return None


@contextmanager
def _recorded() -> Iterator[list[str]]:
    """The kernels called in the block (torch's names, without dtypes)."""
    from .reference import record_operators

    names: list[str] = []
    with record_operators() as called:
        yield names
    names.extend(dict.fromkeys(name.split("[", 1)[0] for name in called))


def _to(value: Any, device: torch.device) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    return value


def _cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_cpu(item) for item in value)
    return value

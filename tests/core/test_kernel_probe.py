"""The ``kernels`` row's judgement of a device's results, in this process.

How a device's result is compared with the CPU's (the tolerance from the dtype), what a case's run
on the device becomes (missing, wrong result, wrong dtype, forward or backward, grouped by
operator), and whether ``ACCELCTL_CPU_FALLBACK=1`` covers each finding by the fallback's own rules.

A fake device is the CPU with cases that misbehave on their second call: the probe runs each
case on the CPU first, then on the device (here the CPU again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from accelctl import KernelGaps
from accelctl._kernels.cases import KernelCase
from accelctl._kernels.compare import difference, tolerance
from accelctl._kernels.probe import MissingKernel, probe_kernels, why_no_fallback

CPU = torch.device("cpu")
PRIVATEUSE1 = torch._C._get_privateuse1_backend_name()


# -- the comparison --------------------------------------------------------------------------------


def test_the_tolerance_is_16_units_in_the_last_place_of_the_dtype_or_tf32() -> None:
    assert tolerance(torch.float32) == 2**-6  # TF32's 2**-10 is coarser than float32's
    assert tolerance(torch.float16) == 2**-6
    assert tolerance(torch.bfloat16) == 2**-3


def test_rounding_passes_and_a_placeholders_result_does_not() -> None:
    cpu = torch.randn(64, generator=torch.Generator().manual_seed(0))
    assert difference(cpu * (1 + 2**-20), cpu) is None  # a few float32 ulps, a reduction's
    assert difference(cpu + 0.01 * cpu.abs().max(), cpu) is None  # TF32-sized
    garbage = difference(torch.zeros(64), cpu)  # what uninitialised memory often holds
    assert (
        garbage
        == "differs from the CPU's by 1 of its largest magnitude (allowed 0.0156 for float32)"
    )


def test_bfloat16_allows_its_own_rounding() -> None:
    cpu = torch.randn(64, generator=torch.Generator().manual_seed(0)).bfloat16()
    assert difference(cpu + 0.1 * cpu.abs().max(), cpu) is None
    found = difference(cpu + 0.2 * cpu.abs().max(), cpu)
    assert found is not None and found.endswith("(allowed 0.125 for bfloat16)")


@pytest.mark.parametrize(
    ("device", "why"),
    [
        (torch.ones(2, 3), "has shape (2, 3) where the CPU's has (3, 2)"),
        (torch.ones(3, 2, dtype=torch.float64), "is float64 where the CPU's is float32"),
        (torch.full((3, 2), float("nan")), "has NaN or infinite values where the CPU's has none"),
        ((torch.ones(3, 2),), "gave 1 results where the CPU gave a tensor"),
        (None, "gave None where the CPU gave a tensor"),
    ],
)
def test_what_differs_is_said(device: Any, why: str) -> None:
    found = difference(device, torch.ones(3, 2))
    assert found is not None and found.startswith(why)


def test_integers_and_tuples_are_compared_exactly_and_by_position() -> None:
    counts = torch.tensor([1, 2])
    assert difference((torch.ones(2), counts), (torch.ones(2), counts)) is None
    assert difference((torch.ones(2), counts + 1), (torch.ones(2), counts)) == (
        "result 1 differs from the CPU's"
    )


def test_autocasts_float32_kept_where_the_cpu_has_bfloat16_compares_by_value() -> None:
    cpu = torch.randn(8, generator=torch.Generator().manual_seed(0)).bfloat16()
    assert difference(cpu.float(), cpu, dtypes=False) is None
    assert difference(cpu.float(), cpu) == "is float32 where the CPU's is bfloat16"


# -- a case's run on a fake device -----------------------------------------------------------------


def second_call(on_cpu: Callable[..., Any], on_device: Callable[..., Any]) -> Callable[..., Any]:
    """``on_cpu`` the first time (the CPU's reference run), ``on_device`` after."""
    calls: list[None] = []

    def run(*inputs: Any) -> Any:
        calls.append(None)
        return (on_cpu if len(calls) == 1 else on_device)(*inputs)

    return run


def one_input(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 3, generator=g).requires_grad_(),)


def case(run: Callable[..., Any], name: str = "fake", op: str = "aten::fake", **more: Any):
    return KernelCase(name, op, one_input, run, **more)


def missing_kernel(*args: Any) -> Any:
    raise NotImplementedError("fake_overrideable not implemented for this backend")


class NoBackward(torch.autograd.Function):
    """Doubles, forward; its backward is missing."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("fake_backward_overrideable not implemented")


def only(found: Any) -> MissingKernel:
    (single,) = found.missing
    return single


def test_a_device_like_the_cpu_is_all_present() -> None:
    found = probe_kernels(CPU, KernelGaps(), [case(lambda x: x * 2)])
    assert (found.missing, found.cases) == ((), ("fake",))
    assert found.reason.startswith("all 1 cases (the layers and optimizer steps")


def test_a_forward_that_raises_is_missing_in_the_devices_words() -> None:
    found = only(
        probe_kernels(CPU, KernelGaps(), [case(second_call(lambda x: x * 2, missing_kernel))])
    )
    assert (found.op, found.phase, found.state, found.cases) == (
        "aten::fake", "forward", "missing", ("fake",),
    )  # fmt: skip
    assert found.seen == "NotImplementedError: fake_overrideable not implemented for this backend"
    # On the CPU the fallback has nothing to do: the model is there already.
    assert (found.fallback, found.why_no_fallback) == (False, "the model already runs on the CPU")


def test_a_placeholders_result_is_wrong_and_named_by_the_plugins_declaration() -> None:
    """The device's run is recorded: the declared kernel it ran is the one named."""
    gaps = KernelGaps(missing=("aten::mul.Tensor",))
    run = second_call(lambda x: x * 2, lambda x: x * 2 - (x * 2).detach())  # zeros, same grads
    found = only(probe_kernels(CPU, gaps, [case(run)]))
    assert (found.phase, found.state, found.kernel) == (
        "forward",
        "wrong-result",
        "aten::mul.Tensor",
    )
    assert found.seen.startswith("differs from the CPU's by 1 of its largest magnitude")


def test_a_missing_backward_is_found_after_a_forward_that_ran() -> None:
    run = second_call(lambda x: x * 2, NoBackward.apply)
    found = only(probe_kernels(CPU, KernelGaps(), [case(run)]))
    assert (found.phase, found.state) == ("backward", "missing")
    assert found.seen == "NotImplementedError: fake_backward_overrideable not implemented"


def test_a_wrong_gradient_is_a_wrong_backward() -> None:
    run = second_call(lambda x: x * 2, lambda x: x.detach() * 2 + x * 0)  # the same forward
    found = only(probe_kernels(CPU, KernelGaps(), [case(run)]))
    assert (found.phase, found.state) == ("backward", "wrong-result")
    assert found.seen.startswith("differs from the CPU's by 1 of its largest magnitude")


def test_an_operator_autocast_must_cast_left_in_float32_is_a_wrong_dtype() -> None:
    """An operator that autocast must cast, left in float32, is a wrong dtype.

    Under bfloat16 autocast, the CPU's linear runs in bfloat16; a device whose autocast does not
    cast it (torch_openreg 0.0.1) gives float32.
    """
    weight = torch.randn(5, 3)
    run = second_call(
        lambda x: torch.nn.functional.linear(x, weight),
        lambda x: torch.nn.functional.linear(x, weight).float(),
    )
    linear = case(run, op="aten::linear", autocast=True)
    found = only(probe_kernels(CPU, KernelGaps(), [linear]))
    assert (found.phase, found.state) == ("forward", "wrong-dtype")
    assert found.seen == "is float32 where the CPU's is bfloat16"


def test_where_the_forward_is_missing_the_backward_is_asked_alone() -> None:
    def backward_alone(x: torch.Tensor, seed: torch.Tensor) -> Any:
        raise NotImplementedError("fake_backward_overrideable not implemented")

    run = second_call(lambda x: x * 2, missing_kernel)
    found = probe_kernels(CPU, KernelGaps(), [case(run, backward_alone=backward_alone)])
    assert [(f.phase, f.state) for f in found.missing] == [
        ("forward", "missing"),
        ("backward", "missing"),
    ]
    run = second_call(lambda x: x * 2, missing_kernel)
    unprobed = probe_kernels(CPU, KernelGaps(), [case(run)])  # no backward without a forward
    assert [f.phase for f in unprobed.missing] == ["forward"]


def test_cases_that_show_the_same_kernel_missing_are_one_entry() -> None:
    cases = [
        case(second_call(lambda x: x, missing_kernel), name="conv1d", op="aten::convolution"),
        case(lambda x: x, name="relu", op="aten::relu"),
        case(second_call(lambda x: x, missing_kernel), name="conv2d", op="aten::convolution"),
    ]
    found = probe_kernels(CPU, KernelGaps(), cases)
    assert [(f.op, f.phase, f.cases) for f in found.missing] == [
        ("aten::convolution", "forward", ("conv1d", "conv2d"))
    ]
    assert found.reason == (
        "missing or wrong on cpu: aten::convolution (forward); ACCELCTL_CPU_FALLBACK=1 runs none "
        "of them on the CPU"
    )


def test_a_missing_kernel_survives_its_json() -> None:
    found = MissingKernel(
        op="aten::convolution",
        phase="backward",
        state="missing",
        seen="NotImplementedError: ...",
        cases=("conv2d",),
        kernel="aten::convolution_backward_overrideable",
        fallback=True,
    )
    assert MissingKernel.from_dict(found.to_dict()) == found
    assert set(found.to_dict()) == {
        "op", "kernel", "phase", "state", "seen", "cases", "fallback", "why_no_fallback",
    }  # fmt: skip


def test_dropout_is_judged_by_its_shape_not_by_the_cpus_draws() -> None:
    from accelctl._kernels.cases import CASES

    dropout = next(c for c in CASES if c.name == "dropout")
    assert probe_kernels(CPU, KernelGaps(), [dropout]).missing == ()
    unscaled = KernelCase(
        "dropout",
        "aten::dropout",
        dropout.make,
        second_call(dropout.run, lambda x: x * (torch.rand(x.shape) > 0.1)),
        judge=dropout.judge,
    )
    found = probe_kernels(CPU, KernelGaps(), [unscaled]).missing[0]
    assert (found.phase, found.state) == ("forward", "wrong-result")
    assert found.seen.startswith("the kept values are not the input scaled by 1/(1-p)")


# -- whether the fallback covers a finding: its own rules ------------------------------------------


ATTENTION = "aten::_scaled_dot_product_fused_attention_overrideable"


@pytest.mark.parametrize(
    ("kernel", "gaps", "why"),
    [
        ("aten::convolution_overrideable", KernelGaps(), None),
        ("aten::convolution_backward_overrideable", KernelGaps(), None),
        (
            "aten::convolution_overrideable",
            KernelGaps(never_fall_back=("aten::convolution_overrideable",)),
            "the plugin declares that aten::convolution_overrideable must never run there",
        ),
        (f"{ATTENTION}_backward", KernelGaps(missing=(ATTENTION,)), None),
        (
            f"{ATTENTION}_backward",
            KernelGaps(missing=(ATTENTION,), never_fall_back=(ATTENTION,)),
            f"its forward, {ATTENTION}, stays on the device: the plugin declares that "
            f"{ATTENTION} must never run there",
        ),
        ("aten::mul.Tensor", KernelGaps(missing=("aten::mul.Tensor",)), None),
        ("aten::_to_copy", KernelGaps(), "it moves tensors between the CPU and the device"),
        ("aten::diagonal", KernelGaps(), "it returns a view of the device's memory"),
        (
            "aten::no_such_op",
            KernelGaps(missing=("aten::no_such_op",)),
            "torch has no operator aten::no_such_op",
        ),
    ],
)
def test_on_a_privateuse1_backend_the_fallbacks_rules_decide(
    kernel: str, gaps: KernelGaps, why: str | None
) -> None:
    assert why_no_fallback(PRIVATEUSE1, gaps, kernel, "missing") == why


def test_what_the_cpu_lacks_too_no_fallback_can_run() -> None:
    """An operator the CPU lacks too is a finding no fallback can run.

    nn.LSTM on torch_openreg: the backend's own fallback sends _thnn_fused_lstm_cell to the CPU,
    which has no such kernel.
    """
    why = why_no_fallback(
        PRIVATEUSE1, KernelGaps(), "aten::_thnn_fused_lstm_cell", "missing", cpu_lacks_it=True
    )
    assert why == "the CPU has no such kernel either"


def test_autocast_rules_and_unnamed_kernels_are_not_the_fallbacks() -> None:
    gaps = KernelGaps()
    assert why_no_fallback(PRIVATEUSE1, gaps, None, "wrong-dtype") == (
        "the device's autocast does not cast it to bfloat16: an autocast rule, not a kernel, "
        "which the fallback does not add"
    )
    assert why_no_fallback(PRIVATEUSE1, gaps, None, "missing") == (
        "the error names no kernel, so accelctl cannot tell which to run on the CPU"
    )
    wrong = why_no_fallback(PRIVATEUSE1, gaps, None, "wrong-result")
    assert wrong is not None and wrong.endswith("its plugin declares missing (kernel_gaps)")


def test_other_devices_have_torchs_switch_or_none() -> None:
    mps = KernelGaps(fallback_variable="PYTORCH_ENABLE_MPS_FALLBACK")
    assert why_no_fallback("mps", mps, "aten::foo", "missing") is None
    assert why_no_fallback("xpu", KernelGaps(), "aten::foo", "missing") == (
        "it serves out-of-tree (PrivateUse1) backends and devices whose plugin names torch's "
        "own switch; xpu is neither"
    )
    never = KernelGaps(
        fallback_variable="PYTORCH_ENABLE_MPS_FALLBACK", never_fall_back=("aten::foo",)
    )
    assert why_no_fallback("mps", never, "aten::foo", "missing") == (
        "the plugin declares that aten::foo must never run there"
    )

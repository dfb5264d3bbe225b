"""Missing kernels in this process (no device): declarations, errors, messages, the fallback switch.

What a plugin declares of its kernels, which errors are a missing kernel, the one line each place
shows, and what ``ACCELCTL_CPU_FALLBACK`` does where accelctl has no kernels to register (the CPU,
CUDA, a device with torch's own switch). The real device's side (torch_openreg) is
tests/openreg/test_openreg_kernels.py.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import accelctl
from accelctl._contract import settings as _settings
from accelctl._contract.kernel_gaps import shown_op
from accelctl._kernels import setup as kernel_setup
from accelctl._kernels.recognize import (
    KernelFailure,
    calling_layer,
    partial_kernel,
    phase_of,
    recognize,
)
from accelctl._kernels.translate import missing_kernel_error

#: Errors as torch 2.13 and its backends raise them (seen on torch_openreg, or torch's MPS text).
CONVOLUTION = (
    "convolution_overrideable not implemented. You are likely triggering this with tensor "
    "backend other than CPU/CUDA/MKLDNN, if this is intended, please use TORCH_LIBRARY_IMPL to "
    "override this function "
)
CONVOLUTION_BACKWARD = (
    "convolution_backward_overrideable: You are likely triggering this with tensor backend "
    "other than CPU/CUDA/MKLDNN, if this is intended, please use TORCH_LIBRARY_IMPL to override "
    "this function "
)
COULD_NOT_RUN = (
    "Could not run '{op}' with arguments from the '{key}' backend. This could be because the "
    "operator doesn't exist for this backend, or was omitted during the selective/custom build "
    "process (if using custom build)."
)
MPS = (
    "The operator 'aten::_linalg_solve_ex.result' is not currently implemented for the MPS "
    "device. If you want this op to be considered for addition please comment on ... As a "
    "temporary fix, you can set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1`"
)


@pytest.fixture(autouse=True)
def _fresh_setups() -> Iterator[None]:
    kernel_setup.forget()
    yield
    kernel_setup.forget()


# -- what a plugin declares ------------------------------------------------------------------


def test_kernel_gaps_are_checked_and_normalised() -> None:
    gaps = accelctl.KernelGaps(
        missing=["aten::convolution_overrideable", "aten::convolution_overrideable"],
        never_fall_back=("aten::add_.Tensor",),
        fallback_variable="PYTORCH_ENABLE_MPS_FALLBACK",
    )
    assert gaps.missing == ("aten::convolution_overrideable",)
    assert not gaps.allows_fallback("aten::add_.Tensor")
    assert gaps.allows_fallback("aten::add_.Scalar")
    with pytest.raises(ValueError, match=r"missing: 'conv2d' is not an operator name"):
        accelctl.KernelGaps(missing=("conv2d",))
    with pytest.raises(TypeError, match="missing must be a tuple or list"):
        accelctl.KernelGaps(missing="aten::add_.Tensor")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fallback_variable 'mps fallback'"):
        accelctl.KernelGaps(fallback_variable="mps fallback")
    never = accelctl.KernelGaps(never_fall_back=("aten::add_",))  # without an overload: all
    assert not never.allows_fallback("aten::add_.Tensor")


def test_partial_kernels_are_checked_and_run_on_the_cpu_after_the_missing_ones() -> None:
    gaps = accelctl.KernelGaps.coerce(
        {"missing": ["aten::convolution_overrideable"], "partial": ["aten::abs", "aten::abs"]}
    )
    assert gaps.partial == ("aten::abs",)
    assert gaps.to_run_on_cpu == ("aten::convolution_overrideable", "aten::abs")
    assert gaps.to_dict()["partial"] == ["aten::abs"]
    with pytest.raises(ValueError, match=r"partial: 'abs' is not an operator name"):
        accelctl.KernelGaps(partial=("abs",))


def test_a_devices_refusal_of_a_dtype_names_a_partial_kernel_by_its_word() -> None:
    """torch_openreg 0.0.3's abs, in bf16; another error, or an operator not declared, is not."""
    refusal = RuntimeError("Abs kernel only supports float type")
    assert partial_kernel(refusal, ("aten::abs",)) == KernelFailure("aten::abs", None)
    assert partial_kernel(refusal, ("aten::mul.Tensor",)) is None
    assert partial_kernel(RuntimeError("absolute tolerance exceeded"), ("aten::abs",)) is None
    assert partial_kernel(ValueError("Abs kernel only supports float type"), ("aten::abs",)) is None


def test_the_hook_may_return_a_dict_or_none_and_nothing_else() -> None:
    assert accelctl.KernelGaps.coerce(None) == accelctl.KernelGaps()
    assert accelctl.KernelGaps.coerce({"missing": ["aten::mul.out"]}).missing == ("aten::mul.out",)
    with pytest.raises(ValueError, match=r"unknown KernelGaps field\(s\) 'lacks'"):
        accelctl.KernelGaps.coerce({"lacks": []})
    with pytest.raises(TypeError, match="expected a KernelGaps"):
        accelctl.KernelGaps.coerce(["aten::mul.out"])  # type: ignore[arg-type]


class Declaring(accelctl.Accelerator):
    name = "declaring"
    device_type = "cuda"

    def __init__(self, gaps: Any = None, breaks: bool = False) -> None:
        self.gaps, self.breaks = gaps, breaks

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1

    def kernel_gaps(self) -> Any:
        if self.breaks:
            raise RuntimeError("the driver's table is unreadable")
        return self.gaps


def test_the_handle_checks_what_the_hook_returns() -> None:
    handle = accelctl.AcceleratorHandle.from_object(Declaring({"missing": ["aten::mul.out"]}))
    assert handle.kernel_gaps() == accelctl.KernelGaps(missing=("aten::mul.out",))
    wrong = accelctl.AcceleratorHandle.from_object(Declaring(42))
    with pytest.raises(accelctl.PluginHookError, match="kernel_gaps"):
        wrong.kernel_gaps()
    assert accelctl.AcceleratorHandle.from_object(Declaring()).kernel_gaps().missing == ()


def test_operators_are_shown_as_a_user_knows_them() -> None:
    assert shown_op("aten::convolution_overrideable") == ("aten::convolution", "forward")
    assert shown_op("aten::convolution_backward_overrideable") == ("aten::convolution", "backward")
    assert shown_op("aten::_scaled_dot_product_fused_attention_overrideable_backward") == (
        "aten::scaled_dot_product_attention",
        "backward",
    )
    assert shown_op("aten::bitwise_and.Tensor_out") == ("aten::bitwise_and.Tensor_out", None)


# -- which errors are a missing kernel --------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kernel", "cpu_lacks_it"),
    [
        (NotImplementedError(CONVOLUTION), "aten::convolution_overrideable", False),
        (
            NotImplementedError(CONVOLUTION_BACKWARD),
            "aten::convolution_backward_overrideable",
            False,
        ),
        (
            NotImplementedError(COULD_NOT_RUN.format(op="aten::erfinv.out", key="PrivateUse1")),
            "aten::erfinv.out",
            False,
        ),
        (
            NotImplementedError(COULD_NOT_RUN.format(op="aten::_thnn_fused_lstm_cell", key="CPU")),
            "aten::_thnn_fused_lstm_cell",
            True,
        ),
        (NotImplementedError(MPS), "aten::_linalg_solve_ex.result", False),
        (
            RuntimeError("\"erfinv_out\" not implemented for 'PrivateUse1'"),
            "aten::erfinv_out",
            False,
        ),
    ],
)
def test_the_shapes_of_a_missing_kernel_are_recognised(
    error: BaseException, kernel: str, cpu_lacks_it: bool
) -> None:
    found = recognize(error, "openreg")
    assert found is not None
    assert (found.kernel, found.cpu_lacks_it) == (kernel, cpu_lacks_it)


@pytest.mark.parametrize(
    "error",
    [
        NotImplementedError(COULD_NOT_RUN.format(op="aten::erfinv.out", key="Meta")),
        RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'"),  # a dtype, not a device
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x2)"),
        ValueError(CONVOLUTION),  # only torch's error classes
    ],
)
def test_other_errors_are_not_a_missing_kernel(error: BaseException) -> None:
    assert recognize(error, "openreg") is None


def test_on_the_cpu_nothing_is_a_missing_kernel_of_the_device() -> None:
    # The CPU is the floor: "run on the CPU" would be no way out.
    assert recognize(NotImplementedError(CONVOLUTION), "cpu") is None
    error = missing_kernel_error(
        NotImplementedError(CONVOLUTION), accelerator="cpu", device=torch.device("cpu")
    )
    assert error is None


class Refuses(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(CONVOLUTION)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(2, 2), Refuses())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def _raised(call: Any) -> BaseException:
    try:
        call()
    except Exception as exc:  # the error as a training path would catch it
        return exc
    raise AssertionError("it did not raise")


def test_the_layer_is_the_innermost_module_on_the_traceback_named_by_its_path() -> None:
    model = Net()
    error = _raised(lambda: model(torch.ones(1, 2)))
    assert calling_layer(error, model) == "Refuses at blocks.1"
    assert calling_layer(error, None) == "Refuses"  # no model to name it by
    wrapped = nn.Module()
    wrapped.module = model  # as DDP holds it
    assert calling_layer(error, wrapped) == "Refuses at blocks.1"
    assert phase_of(error) == "forward"


def test_an_error_from_the_backward_pass_is_said_to_be_there() -> None:
    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError(CONVOLUTION_BACKWARD)

    x = torch.ones(2, requires_grad=True)
    loss = Broken.apply(x).sum()
    error = _raised(loss.backward)
    assert phase_of(error) == "backward"
    translated = missing_kernel_error(
        error, accelerator="privateuse1", device=torch.device("cuda", 0), loss=loss
    )
    assert translated is not None
    assert (translated.op, translated.phase, translated.layer) == (
        "aten::convolution",
        "backward",
        None,
    )
    assert "in the backward pass" in str(translated)


# -- the one line, where it is shown ----------------------------------------------------------


def _error(**parts: Any) -> accelctl.MissingKernelError:
    fields: dict[str, Any] = {
        "op": "aten::convolution",
        "kernel": "aten::convolution_overrideable",
        "layer": "Conv2d at features.0",
        "device": "openreg:0",
        "accelerator": "privateuse1",
        "phase": "forward",
    }
    fields.update(parts)
    return accelctl.MissingKernelError(**fields)


def test_in_python_the_ways_out_are_a_keyword_and_a_variable() -> None:
    error = _error()
    assert str(error) == (
        "aten::convolution has no kernel for openreg:0 (plugin privateuse1), called by Conv2d at "
        'features.0: to train on the CPU, pass accelerator="cpu" (or set '
        "ACCELCTL_ACCELERATOR=cpu); to run the kernels the device lacks on the CPU, set "
        "ACCELCTL_CPU_FALLBACK=1 in the environment"
    )
    assert isinstance(error, NotImplementedError) and isinstance(error, accelctl.AccelctlError)
    assert "\n" not in str(error)


def test_on_the_command_line_the_ways_out_are_the_users_command() -> None:
    line = _error().for_command(["python", "train.py", "--name", "two words"])
    assert "to train on the CPU, ACCELCTL_ACCELERATOR=cpu python train.py --name 'two words';" in (
        line
    )
    assert "ACCELCTL_CPU_FALLBACK=1 python train.py --name 'two words' (ACCELCTL_DEBUG=1" in line


def test_where_the_fallback_cannot_help_it_says_why_instead() -> None:
    error = _error(fallback="the CPU has no such kernel either")
    assert "(ACCELCTL_CPU_FALLBACK=1 cannot run it: the CPU has no such kernel either)" in str(
        error
    )
    assert "to run the kernels the device lacks" not in str(error)
    mps = _error(device="mps:0", switch="PYTORCH_ENABLE_MPS_FALLBACK=1")
    assert "the CPU, PYTORCH_ENABLE_MPS_FALLBACK=1 python x.py" in mps.for_command(
        ["python", "x.py"]
    )


def test_it_is_made_from_a_message_alone_and_survives_pickling() -> None:
    assert str(accelctl.MissingKernelError("npu: no kernel for aten::foo")) == (
        "npu: no kernel for aten::foo"
    )
    error = _error(fallback="why not")
    copied = pickle.loads(pickle.dumps(error))
    assert type(copied) is accelctl.MissingKernelError
    assert copied.parts() == error.parts() and str(copied) == str(error)


ENDS_ON_IT = """
import accelctl
from accelctl._kernels.translate import show_as_one_line
show_as_one_line()
raise accelctl.MissingKernelError(op="aten::convolution", device="openreg:0",
                                  accelerator="privateuse1")
"""


@pytest.mark.parametrize("debug", [False, True])
def test_a_script_ending_on_it_shows_one_line_and_exits_1(debug: bool) -> None:
    env = {"PATH": "/usr/bin:/bin", **({"ACCELCTL_DEBUG": "1"} if debug else {})}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ENDS_ON_IT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # a hang guard: an interpreter and accelctl's import
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("accelctl: aten::convolution has no kernel for openreg:0")
    assert f"ACCELCTL_ACCELERATOR=cpu {sys.executable} -c " in lines[-1]
    assert ("Traceback (most recent call last):" in done.stderr) is debug


def test_other_errors_keep_pythons_own_display() -> None:
    code = "from accelctl._kernels.translate import show_as_one_line\nshow_as_one_line()\n1/0\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" in done.stderr and "ZeroDivisionError" in done.stderr


# -- the switch where accelctl registers nothing ----------------------------------------------


def test_the_switch_is_read_strictly() -> None:
    assert _settings.cpu_fallback({"ACCELCTL_CPU_FALLBACK": " On "})
    assert not _settings.cpu_fallback({"ACCELCTL_CPU_FALLBACK": "0"})
    assert not _settings.cpu_fallback({})
    with pytest.raises(_settings.SettingError, match="ACCELCTL_CPU_FALLBACK='maybe'"):
        _settings.cpu_fallback({"ACCELCTL_CPU_FALLBACK": "maybe"})


def test_on_cuda_the_switch_does_nothing_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELCTL_CPU_FALLBACK", "1")
    handle = accelctl.AcceleratorHandle.from_object(Declaring())
    with pytest.warns(accelctl.CPUFallbackWarning, match="does nothing on cuda"):
        done = kernel_setup.set_up_kernels(handle, torch.device("cuda", 0))
    assert done.fallback == "none" and done.unavailable is not None
    error = missing_kernel_error(
        NotImplementedError(COULD_NOT_RUN.format(op="aten::foo", key="CUDA")),
        accelerator="declaring",
        device="cuda:0",
    )
    assert error is not None and error.fallback == done.unavailable
    assert "ACCELCTL_CPU_FALLBACK=1 cannot run it: it serves out-of-tree" in str(error)


def test_a_device_with_torchs_own_switch_is_told_to_set_it_before_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELCTL_CPU_FALLBACK", "1")
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    mps_like = Declaring({"fallback_variable": "PYTORCH_ENABLE_MPS_FALLBACK"})
    handle = accelctl.AcceleratorHandle.from_object(mps_like)
    with pytest.warns(accelctl.CPUFallbackWarning, match="set PYTORCH_ENABLE_MPS_FALLBACK=1 "):
        done = kernel_setup.set_up_kernels(handle, torch.device("mps"))
    assert done.fallback == "none" and done.switch == "PYTORCH_ENABLE_MPS_FALLBACK=1"

    kernel_setup.forget()
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")  # set before torch, as told
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_setup.set_up_kernels(handle, torch.device("mps")).fallback == "torch"


def test_on_the_cpu_nothing_is_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELCTL_CPU_FALLBACK", "1")
    handle = accelctl.get_accelerator("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say either
        done = kernel_setup.set_up_kernels(handle, torch.device("cpu"))
    assert done.fallback == "none" and kernel_setup.fallback_calls("cpu") is None
    assert "cpu_fallback_calls" not in handle.device_stats("cpu")


def test_a_broken_hook_is_warned_about_and_the_run_goes_on() -> None:
    handle = accelctl.AcceleratorHandle.from_object(Declaring(breaks=True))
    with pytest.warns(accelctl.PluginWarning, match="the driver's table is unreadable"):
        done = kernel_setup.set_up_kernels(handle, torch.device("cuda", 0))
    assert done.gaps == accelctl.KernelGaps()


def test_the_vocabulary_knows_the_fallbacks_figure() -> None:
    from accelctl.stats_keys import VOCABULARY, problems

    assert VOCABULARY["cpu_fallback_calls"].unit == "calls"
    assert problems({"cpu_fallback_calls": -1}, ()) == [
        "'cpu_fallback_calls' is -1: calls cannot be negative"
    ]

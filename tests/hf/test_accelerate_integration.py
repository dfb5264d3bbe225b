"""accelctl.integrations.accelerate: Accelerate's Accelerator on accelctl plugins, in-process.

The real cpu plugin, and class-based plugins whose devices are ``meta`` tensors, as a real NPU's are
not CPUs. Real devices and several processes: tests/openreg/.
"""

from __future__ import annotations

import copy
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anotherrelease import META_ACCELERATOR, refused_import, run_scenario
from bridgepatching import assert_enabled_and_undone

accelerate = pytest.importorskip("accelerate")

import torch  # noqa: E402
from accelerate.state import AcceleratorState, GradientState, PartialState  # noqa: E402
from fakeaccelerators import TWO_PROCESSES, MetaAccelerator  # noqa: E402

import accelctl  # noqa: E402
from accelctl._kernels import setup  # noqa: E402
from accelctl.integrations._accelerate import state as _accelerate_state  # noqa: E402
from accelctl.integrations._shared.kernel_errors import TranslatedForward  # noqa: E402
from accelctl.integrations._shared.parameters import keeping_parameters  # noqa: E402
from accelctl.integrations.accelerate import ADAPTED, Accelerator, enable  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_accelerate_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start and end every test without Accelerate's process-wide state or a launcher's variables.

    Nor Accelerate's variables from the caller's environment.
    """
    for name in (*TWO_PROCESSES, "ACCELERATE_TORCH_DEVICE", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def test_enable_records_the_two_patches_and_undo_puts_accelerates_own_back() -> None:
    assert ADAPTED
    assert_enabled_and_undone(
        enable,
        _accelerate_state.PATCHES,
        [f"accelerate.state.PartialState.{name}" for name in ("_prepare_backend", "set_device")],
    )
    assert _accelerate_state.is_active()


def test_the_cpu_plugin_is_accelerates_own_cpu_set_up_and_trains() -> None:
    accelerator = Accelerator("cpu", mixed_precision="bf16")
    assert isinstance(accelerator, accelerate.Accelerator)
    assert accelerator.accelctl_accelerator.name == "cpu"
    assert (accelerator.device.type, accelerator.num_processes) == ("cpu", 1)
    assert accelerator.distributed_type == accelerate.DistributedType.NO
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 1))
    dtypes = []  # inside the forward that Accelerate autocasts (its outputs come back float32)
    model[0].register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(32, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    losses = []
    for _ in range(20):
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert set(dtypes) == {torch.bfloat16}  # autocast on the cpu device type


def test_a_non_cpu_plugin_device_becomes_accelerates_device() -> None:
    plugin = MetaAccelerator()
    accelerator = Accelerator(plugin, devices="1,")
    assert accelerator.device == torch.device("meta", 1)
    assert accelerator.distributed_type == accelerate.DistributedType.NO
    assert plugin.set_up == ["meta:1"]  # made current through the plugin's setup_device


def test_alone_auto_is_one_device() -> None:
    assert Accelerator(MetaAccelerator("fakeccl")).device == torch.device("meta", 0)


def test_several_processes_without_a_backend_are_refused_when_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(accelctl.ProcessSetupError) as info:
        Accelerator(MetaAccelerator())
    message = str(info.value)
    assert "'metaacc' runs in a single process only (its distributed_backend is None)" in message
    assert "2 devices (meta:0, meta:1)" in message
    assert "would train each process alone" in message
    assert not PartialState._shared_state  # refused before Accelerate made any state


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_refusal_when_made_ends_the_script_as_rank_0s_line(
    rank: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under ``accelerate launch`` every rank is refused; rank 0 alone prints accelctl's line.

    Should the refusal end the script, rank 0 prints accelctl's line, no traceback, and the others
    nothing.
    """
    from accelctl._launching import error_line as _error_line

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(_error_line, "_quiet", False)
    monkeypatch.setattr(_error_line, "_carriers", [])
    for name, value in {**TWO_PROCESSES, "RANK": rank}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(accelctl.ProcessSetupError) as info:
        Accelerator(MetaAccelerator())
    sys.excepthook(type(info.value), info.value, info.value.__traceback__)
    err = capsys.readouterr().err
    if rank == "0":
        assert err.startswith("accelctl: accelctl accelerator 'metaacc' runs in a single "), err
        assert err.endswith(" (ACCELCTL_DEBUG=1 shows the traceback)\n") and "Traceback" not in err
    else:
        assert err == ""


def test_several_devices_without_a_launcher_are_refused_with_the_command() -> None:
    with pytest.raises(accelctl.ProcessSetupError) as info:
        Accelerator(MetaAccelerator("fakeccl"), devices=2)
    assert "accelctl launch --accelerator metaacc --devices 2 <your script>" in str(info.value)
    assert "accelerate launch --multi_gpu --num_processes 2" in str(info.value)
    with pytest.raises(accelctl.ProcessSetupError, match="single process only"):
        Accelerator(MetaAccelerator(), devices=2)


def test_devices_that_do_not_fit_the_launchers_processes_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(accelctl.ProcessSetupError, match="started 2 process"):
        Accelerator(MetaAccelerator("fakeccl"), devices=[0])
    with pytest.raises(accelctl.ProcessSetupError, match="device index 0"):
        Accelerator(MetaAccelerator("fakeccl"), devices="1,0")


def test_a_state_made_before_that_does_not_match_is_refused() -> None:
    PartialState(cpu=True)  # as a transformers TrainingArguments would, earlier
    with pytest.raises(accelctl.ProcessSetupError) as info:
        Accelerator(MetaAccelerator())
    assert "runs process 0 of 1 on meta:0, but Accelerate's state is" in str(info.value)
    assert "make this Accelerator first" in str(info.value)


def test_cpu_is_accelctls_choice() -> None:
    with pytest.raises(TypeError, match=r"Accelerator\('cpu'\)"):
        Accelerator("cpu", cpu=True)


def test_moving_a_model_keeps_its_parameters_for_an_optimizer_made_before() -> None:
    model = torch.nn.Linear(2, 1)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # meta tensors, like openreg's, cannot take a CPU tensor's place: torch would replace them.
    with keeping_parameters(torch.device("meta")):
        model.to("meta")
    assert model.weight is weight and weight.device.type == "meta"
    assert optimizer.param_groups[0]["params"][0] is model.weight
    assert not torch.__future__.get_swap_module_params_on_conversion()  # put back


#: Import the bridge after ``{change}`` (a release newer than the window, or one whose internal
#: changed), then make an Accelerator on the CPU plugin and one on a ``meta`` device.
ANOTHER_ACCELERATE = (
    """
import json, warnings
import accelerate
from accelerate.state import AcceleratorState, PartialState
{change}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from accelctl.integrations import accelerate as bridge
imported_wrapped = hasattr(PartialState._prepare_backend, "__accelctl_adapted__")
"""
    + META_ACCELERATOR
    + """

cpu = bridge.Accelerator("cpu")  # Accelerate's own choice is the plugin's: accepted
cpu_device = str(cpu.device)
AcceleratorState._reset_state(reset_partial_state=True)
try:
    meta = str(bridge.Accelerator(Meta()).device)
except accelctl.ProcessSetupError as error:
    meta = str(error)
print(json.dumps({{
    "adapted": bridge.ADAPTED,
    "wrapped": hasattr(PartialState._prepare_backend, "__accelctl_adapted__"),
    "imported_wrapped": imported_wrapped,
    "cpu": cpu_device,
    "meta": meta,
    "warnings": [str(w.message) for w in caught if "accelctl" in str(w.message)],
}}))
"""
)


def _another_accelerate(change: str) -> dict[str, Any]:
    return run_scenario(ANOTHER_ACCELERATE.format(change=change))


@pytest.mark.slow
@pytest.mark.parametrize("version", ["1.99.0", "1.3.0"], ids=["newer", "older"])
def test_an_accelerate_outside_the_window_with_the_same_internals_is_adapted_with_one_warning(
    version: str,
) -> None:
    # Older as newer: never refused by its number alone (the shape checks decide; the real
    # 1.3.0 lacks Accelerator.is_fsdp2 and is refused for it: tests/below).
    result = _another_accelerate(f'accelerate.__version__ = "{version}"')
    assert (result["adapted"], result["wrapped"], result["cpu"]) == (True, True, "cpu")
    assert result["imported_wrapped"] is False  # the bridge's Accelerator enabled it
    assert result["meta"] == "meta:0"  # the plugin's device, not Accelerate's CPU
    (warning,) = result["warnings"]
    assert f"tested with accelerate 1.13 to 1.16, not {version}" in warning
    assert "so it adapts them" in warning


@pytest.mark.slow
def test_a_changed_internal_is_refused_when_the_bridge_is_imported() -> None:
    # What a release that renamed a parameter looks like to the bridge (Accelerate itself
    # passes them by position, and runs as before).
    result = refused_import(
        "accelerate",
        "from accelerate.state import PartialState",
        "original = PartialState._prepare_backend\n"
        "def _prepare_backend(self, cpu=False, sagemaker=False, backend=None):\n"
        "    return original(self, cpu, sagemaker, backend)\n"
        "PartialState._prepare_backend = _prepare_backend",
        probe="hasattr(PartialState._prepare_backend, '__accelctl_adapted__')",
    )
    assert result["refused"] == (
        f"accelctl.integrations.accelerate cannot run on accelerate {accelerate.__version__}: "
        "accelerate.state.PartialState._prepare_backend has changed: it takes (self, cpu, "
        "sagemaker, backend), the bridge passes (self, cpu, sagemaker_dp, backend). The bridge "
        "is tested with accelerate 1.13 to 1.16: pip install 'accelerate>=1.13,<1.17' installs "
        "a tested release (pip install 'accelctl[accelerate]' the newest)"
    )
    # Refused before the bridge ran anything of Accelerate's, never from inside it.
    assert str(result["raised_in"]).endswith(os.path.join("_shared", "versions.py"))
    assert (result["probe"], result["warnings"]) == (False, [])


README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_block_runs_as_it_stands(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    marker = "<!-- tests/hf/test_accelerate_integration.py runs the next block -->"
    block = text.split(marker, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, str(README), "exec"), {})
    assert capsys.readouterr().out.strip() == "cpu DistributedType.NO"


# -- issue 45: a kernel the device lacks is accelctl's MissingKernelError ------------------------

#: torch's dispatcher, for an operator the ``meta`` plugin's device has no kernel for.
NO_KERNEL = "Could not run 'aten::frobnicate{}' with arguments from the 'Meta' backend."


class Lacking(torch.nn.Module):
    """A layer whose forward meets a kernel its device lacks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(NO_KERNEL.format(""))


class LackingBackward(torch.autograd.Function):
    """The identity, whose backward meets a kernel the device lacks."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(NO_KERNEL.format("_backward"))


@pytest.fixture
def _excepthook_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's excepthook as it was, after a test that raised accelctl's one line."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)


@pytest.fixture
def _kernels_set_up_afresh() -> Iterator[None]:
    """What set_up_kernels did is per process: each test here starts without it."""
    setup.forget()
    yield
    setup.forget()


@pytest.mark.usefixtures("_kernels_set_up_afresh")
def test_the_accelerator_sets_the_devices_kernels_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELCTL_CPU_FALLBACK", "1")
    plugin = MetaAccelerator()
    with pytest.warns(accelctl.CPUFallbackWarning, match=r"does nothing on meta \(metaacc\)"):
        Accelerator(plugin)
    done = setup.setup_for("meta")
    assert done is not None and (done.accelerator, done.fallback) == ("metaacc", "none")
    assert plugin.set_up == ["meta:0"]


@pytest.mark.usefixtures("_excepthook_kept")
def test_a_kernel_the_device_lacks_in_the_forward_names_the_layer() -> None:
    accelerator = Accelerator(MetaAccelerator())
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(4, 4), Lacking()))
    with pytest.raises(accelctl.MissingKernelError) as info:
        model(torch.zeros(2, 4, device=accelerator.device))
    assert info.value.parts() == {
        "op": "aten::frobnicate",
        "kernel": "aten::frobnicate",
        "layer": "Lacking at 1",
        "device": "meta:0",
        "accelerator": "metaacc",
        "phase": "forward",
        # accelctl's CPU fallback serves PrivateUse1 backends (openreg's: tests/hf/
        # test_openreg_accelerate.py), and MPS through torch's own switch: the error says so.
        "fallback": "it serves out-of-tree (PrivateUse1) backends and devices whose plugin "
        "names torch's own switch; meta is neither",
        "switch": "ACCELCTL_CPU_FALLBACK=1",
        "cpu_way": None,  # no wording of its own: ACCELCTL_ACCELERATOR=cpu
    }
    assert isinstance(info.value.__cause__, NotImplementedError)


@pytest.mark.usefixtures("_excepthook_kept")
def test_a_kernel_the_device_lacks_in_backward_is_named() -> None:
    accelerator = Accelerator(MetaAccelerator())
    x = torch.zeros(2, 4, device=accelerator.device, requires_grad=True)
    with pytest.raises(accelctl.MissingKernelError) as info:
        accelerator.backward(LackingBackward.apply(x).sum())
    assert (info.value.op, info.value.phase) == ("aten::frobnicate_backward", "backward")
    assert (info.value.device, info.value.accelerator) == ("meta:0", "metaacc")


def test_other_errors_pass_through_the_forward_and_backward_unchanged() -> None:
    raised = ValueError("the user's own")

    class Failing(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise raised

    accelerator = Accelerator(MetaAccelerator())
    model = accelerator.prepare(Failing())
    with pytest.raises(ValueError) as info:
        model(torch.zeros(1, device=accelerator.device))
    assert info.value is raised
    with pytest.raises(RuntimeError) as engine:
        accelerator.backward(torch.zeros(1, device=accelerator.device))  # no graph
    assert type(engine.value) is RuntimeError and "does not require grad" in str(engine.value)


def test_on_the_cpu_a_missing_kernel_stays_torchs_error() -> None:
    # The CPU is the floor: nothing runs in its place, so torch's error is the whole story.
    accelerator = Accelerator("cpu")
    model = accelerator.prepare(torch.nn.Sequential(Lacking()))
    with pytest.raises(NotImplementedError) as info:
        model(torch.zeros(1))
    assert not isinstance(info.value, accelctl.MissingKernelError)


def test_the_prepared_forward_is_wrapped_once_and_copies_and_pickles() -> None:
    accelerator = Accelerator("cpu")
    model = torch.nn.Linear(2, 1)
    prepared = accelerator.prepare(accelerator.prepare(model))
    wrapper = prepared.forward.__func__
    assert isinstance(wrapper, TranslatedForward)
    assert wrapper.__wrapped__ is torch.nn.Linear.forward  # one wrapper, around the layer's own
    copied = copy.deepcopy(prepared)
    assert copied.forward.__self__ is copied  # bound to the copy, as Accelerate's wrapper is
    assert torch.equal(copied(torch.ones(2)), prepared(torch.ones(2)))
    buffer = io.BytesIO()
    torch.save(prepared, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert torch.equal(loaded(torch.ones(2)), prepared(torch.ones(2)))


def test_unwrapping_without_the_fp32_wrapper_gives_the_models_own_forward() -> None:
    accelerator = Accelerator("cpu", mixed_precision="bf16")
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    unwrapped = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert unwrapped.forward.__func__ is torch.nn.Linear.forward

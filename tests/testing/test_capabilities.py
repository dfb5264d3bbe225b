"""``accelctl.capabilities``: each probe of the matrix, on the CPU, and its "no" branches.

In this process; the "no" branches through fake device modules. The collective and compile probes'
"yes" on a real group are asserted by the matrix's run on the CPU plugin
(test_capabilities_matrix.py), where they run in a process of their own.
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import accelctl
from accelctl import capabilities
from accelctl.capabilities import (
    CAPABILITIES,
    FSDP_NEEDS,
    Capability,
    fsdp_gaps,
    iter_capabilities,
)
from accelctl.testing import matrix


def probe(name: str, device_type: str = "cpu", backend: str | None = "gloo", **module: Any):
    """Run one probe; ``module`` (names to objects) stands in for ``torch.<device_type>``."""
    state = capabilities._Probe(device_type, backend)
    if module:
        state.module = types.SimpleNamespace(__name__="torch_fake.fake", **module)
    try:
        return capabilities._run(name, state)
    finally:
        state.close()


@pytest.mark.parametrize("module", [capabilities, matrix], ids=lambda m: m.__name__)
def test_torch_is_imported_inside_the_probes_only(module: types.ModuleType) -> None:
    """The probes' modules import torch inside the probes only, never at module level.

    `accelctl validate` (and its --help) loads both modules; an import under ``if TYPE_CHECKING:``
    is not at module level.
    """
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    imported = [alias.name for node in tree.body if isinstance(node, ast.Import)
                for alias in node.names]  # fmt: skip
    imported += [node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom)]
    assert [name for name in imported if name.split(".")[0] == "torch"] == []


def test_every_row_has_a_probe_and_fsdp_needs_are_rows() -> None:
    assert set(capabilities._PROBES) == set(CAPABILITIES)
    assert set(FSDP_NEEDS) <= set(CAPABILITIES)
    assert FSDP_NEEDS == (
        "device-streams",
        "storage-resize",
        "all-gather-into-tensor",
        "reduce-scatter-tensor",
    )


@pytest.mark.parametrize(
    ("row", "dtype"), [("bf16-autocast", "bfloat16"), ("fp16-autocast", "float16")]
)
def test_autocast_on_cpu_runs_a_matmul_in_the_low_precision(row: str, dtype: str) -> None:
    found = probe(row)
    assert found == Capability(
        row,
        True,
        f"a float32 matmul under torch.autocast('cpu', dtype=torch.{dtype}) ran in torch.{dtype}",
    )


def test_autocast_that_torch_does_not_offer_is_a_no(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda device_type: False)
    found = probe("bf16-autocast")
    assert not found.supported
    assert "torch.amp.is_autocast_available('cpu') is False" in found.reason


def test_autocast_that_does_not_cast_is_a_no(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoCast:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __enter__(self) -> None:
            pass

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(torch, "autocast", NoCast)
    found = probe("fp16-autocast")
    assert not found.supported
    assert found.reason.endswith("gave torch.float32: the device's autocast does not cast to it")


def test_rng_state_on_cpu_reproduces_a_draw() -> None:
    assert probe("rng-state") == Capability(
        "rng-state", True, "restoring torch.get_rng_state() reproduced a torch.rand draw on cpu"
    )


def test_a_device_state_that_does_not_govern_its_draws_is_a_no() -> None:
    """torch_openreg 0.0.2: its generator's state never changes, the draws come from the CPU's."""
    frozen = torch.zeros(8, dtype=torch.uint8)
    found = probe(
        "rng-state", get_rng_state=lambda index: frozen.clone(), set_rng_state=lambda s, i: None
    )
    assert not found.supported
    assert found.reason == (
        "restoring torch.cpu.get_rng_state(0) did not reproduce a torch.rand draw on cpu "
        "(the draw left that state as it was: it comes from elsewhere)"
    )


def test_a_device_module_without_rng_state_is_a_no() -> None:
    found = probe("rng-state", manual_seed=lambda seed: None)
    assert found == Capability(
        "rng-state", False, "torch_fake.fake has no get_rng_state (nor torch.cpu)"
    )


def test_cpu_has_no_memory_figures() -> None:
    found = probe("memory-stats")
    assert found == Capability(
        "memory-stats",
        False,
        "cpu has no device memory figures (torch.accelerator covers accelerators)",
    )


def test_memory_figures_of_another_accelerator_are_not_this_devices() -> None:
    state = capabilities._Probe("cpu", None)
    state.device_type = "fake"  # the CPU's tensors, under another device type's name
    found = capabilities._run("memory-stats", state)
    current = torch.accelerator.current_accelerator()
    seen = "none" if current is None else repr(current.type)
    assert found == Capability(
        "memory-stats",
        False,
        f"torch.accelerator's current accelerator is {seen}, not 'fake': its memory figures "
        "are not this device's",
    )


def test_cpu_streams_and_events_are_what_fsdp2_uses() -> None:
    found = probe("device-streams")
    assert found.supported, found.reason
    assert found.reason.startswith("torch.cpu.Stream(priority=-1), Event().record()")


def test_a_device_module_without_streams_is_a_no_in_its_own_words() -> None:
    """The words FSDP2's own failure has on torch_openreg 0.0.2, with what else is missing."""
    module = types.ModuleType("torch_fake.fake")
    state = capabilities._Probe("cpu", None)
    state.device_type, state.module = "fake", module
    found = capabilities._run("device-streams", state)
    assert found == Capability(
        "device-streams",
        False,
        "module 'torch_fake.fake' has no attribute 'Stream' (nor 'Event', 'current_stream'); "
        "FSDP2 takes Stream, Event and current_stream from torch.fake",
    )


def test_a_device_type_without_a_module_is_a_no() -> None:
    state = capabilities._Probe("cpu", None)
    state.device_type, state.module = "fake", None
    found = capabilities._run("device-streams", state)
    assert not found.supported
    assert found.reason.startswith("torch has no module torch.fake")


def test_storage_resize_on_cpu() -> None:
    found = probe("storage-resize")
    assert found == Capability(
        "storage-resize",
        True,
        "a cpu tensor's untyped_storage().resize_(0) and back to 64 bytes ran",
    )


def test_storage_that_cannot_resize_is_a_no_with_the_devices_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any, size: int) -> None:
        raise NotImplementedError("implement resizePrivateUse1Bytes")

    monkeypatch.setattr(torch.UntypedStorage, "resize_", refuse)
    found = probe("storage-resize")
    assert found == Capability(
        "storage-resize", False, "NotImplementedError: implement resizePrivateUse1Bytes"
    )


@pytest.mark.parametrize(
    "row", ["ddp", "all-gather-into-tensor", "reduce-scatter-tensor", "broadcast", "all-reduce"]
)
def test_collectives_without_a_backend_are_a_no_that_says_so(row: str) -> None:
    found = probe(row, backend=None)
    assert found == Capability(
        row, False, "no distributed backend (distributed_backend is None): one process only"
    )


@pytest.mark.parametrize("row", ["broadcast", "all-reduce"])
def test_zeros_other_collectives_that_change_the_data_are_a_no(
    row: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend whose broadcast or all_reduce alters what one process holds."""
    import torch.distributed as dist

    def doubled(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        tensor.mul_(2)

    monkeypatch.setattr(dist, row.replace("-", "_"), doubled)
    found = probe(row)
    name = row.replace("-", "_")
    assert found == Capability(
        row, False, f"torch.distributed.{name} on 1 process gave [0.0, 2.0, 4.0, 6.0]"
    )


def test_deepspeeds_device_ops_have_builds_on_the_cpu_only() -> None:
    assert probe("deepspeed-device-ops").supported
    found = probe("deepspeed-device-ops", device_type="meta", backend=None)
    assert found == Capability(
        "deepspeed-device-ops",
        False,
        "DeepSpeed builds its device ops for its own list of devices: none for 'meta' "
        "(FusedAdam, FusedLamb, FusedLion and the others raise MissingOpError); a torch "
        'optimizer, or "torch_adam": true, runs instead',
    )


@pytest.mark.parametrize(
    ("variable", "value", "lacking"),
    [
        ("CXX", "/nonexistent/c++", "no C++ compiler ('/nonexistent/c++', from $CXX or else "
         "'c++') on PATH"),
        ("PATH", "/nonexistent", "no C++ compiler ('c++', from $CXX or else 'c++') on PATH; "
         "no ninja on PATH (pip install ninja)"),
    ],
)  # fmt: skip
def test_deepspeeds_host_ops_need_a_compiler_and_ninja(
    variable: str, value: str, lacking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(variable, value)
    found = probe("deepspeed-host-ops")
    assert not found.supported
    assert f"compiled on first use on the CPU, and this machine has {lacking}: ZeRO-Offload" in (
        found.reason
    )
    assert '"zero_force_ds_cpu_optimizer": false runs' in found.reason


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        ("nosuch", "the backend 'nosuch' is not a torch.distributed backend this torch knows ("),
        ("nccl", "the backend 'nccl' does not support 'cpu' tensors (it is registered for cuda)"),
        ("cuda:nccl", "the backend 'cuda:nccl' names no backend for device type 'cpu'"),
    ],
)
def test_a_backend_not_registered_for_the_device_makes_no_group(backend: str, why: str) -> None:
    found = probe("ddp", backend=backend)
    assert not found.supported
    assert found.reason.startswith(why)
    assert not torch.distributed.is_initialized()


def test_compile_without_an_inductor_backend_is_the_eager_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A device with no code generator: dynamo traces it with backend="eager", inductor has none.

    torch_openreg's shape; faked, so no compiler is imported here.
    """
    asked: list[str] = []
    common = types.ModuleType("torch._inductor.codegen.common")
    common.init_backend_registration = lambda: None
    common.get_scheduling_for_device = asked.append  # returns None
    monkeypatch.setitem(sys.modules, "torch._inductor.codegen.common", common)
    monkeypatch.setattr(torch, "compile", lambda function, backend: function)
    found = probe("compile")
    assert asked == ["cpu"]
    assert found == Capability(
        "compile",
        False,
        "eager fallback only: torch.compile(backend='eager') ran, but inductor has no code "
        "generator registered for 'cpu' (register_backend_for_device), so the default backend "
        "fails",
    )


def test_compile_that_fails_even_eager_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(function: Any, backend: str) -> Any:
        raise RuntimeError("dynamo cannot trace this device")

    monkeypatch.setattr(torch, "compile", broken)
    found = probe("compile")
    assert found == Capability(
        "compile",
        False,
        "torch.compile(backend='eager') failed: RuntimeError: dynamo cannot trace this device",
    )


def test_a_probe_that_raises_is_a_no_in_the_exceptions_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def crash(state: Any) -> str:
        raise ValueError("the runtime said no")

    monkeypatch.setitem(capabilities._PROBES, "rng-state", crash)
    assert probe("rng-state") == Capability("rng-state", False, "ValueError: the runtime said no")


def test_fsdp_gaps_on_cpu_with_gloo_is_empty() -> None:
    assert fsdp_gaps("cpu", "gloo") == ()


def test_fsdp_gaps_without_a_backend_are_the_collectives() -> None:
    why = "no distributed backend (distributed_backend is None): one process only"
    assert fsdp_gaps("cpu", None) == (
        Capability("all-gather-into-tensor", False, why),
        Capability("reduce-scatter-tensor", False, why),
    )


def test_fsdp_gaps_name_the_missing_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.cpu, "Stream")
    (gap,) = fsdp_gaps("cpu", "gloo")
    assert gap.name == "device-streams"
    assert gap.reason.startswith("module 'torch.cpu' has no attribute 'Stream';")


@pytest.fixture
def a_process_group() -> Iterator[None]:
    import torch.distributed as dist

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_probing_refuses_a_process_that_has_a_group(a_process_group: None) -> None:
    with pytest.raises(RuntimeError, match="already has a default process group: probe in a"):
        next(iter_capabilities("cpu", "gloo"))


def test_the_group_a_probe_made_is_destroyed_when_probing_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(capabilities, "CAPABILITIES", ("all-gather-into-tensor", "compile"))
    rows = iter_capabilities("cpu", "gloo")
    assert next(rows) == Capability(
        "all-gather-into-tensor",
        True,
        "torch.distributed.all_gather_single ran on a 1-process 'gloo' group",
    )
    assert dist.is_initialized()
    rows.close()  # a generator
    assert not dist.is_initialized()


# -- the kernels row -------------------------------------------------------------------------------


def test_the_cpus_kernels_are_all_present_and_nothing_is_declared() -> None:
    """The CPU is the reference: each case runs as on it (a check of the cases themselves)."""
    from accelctl._kernels.cases import CASES

    found = probe("kernels")
    assert (found.supported, found.missing_kernels) == (True, ())
    assert found.kernel_cases == tuple(case.name for case in CASES)
    assert found.kernel_gaps == accelctl.KernelGaps()
    assert found.reason == (
        f"all {len(CASES)} cases (the layers and optimizer steps of a small CNN and a GPT-2 "
        "block, in float32 and under bfloat16 autocast, forward and backward) ran on cpu as on "
        "the CPU"
    )
    assert set(found.to_dict()) == {
        "name", "supported", "reason", "missing_kernels", "kernel_cases", "kernel_gaps",
    }  # fmt: skip


def test_a_missing_kernel_makes_the_row_a_no_that_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case whose device run (the second) raises, on the CPU standing in for a device."""
    from accelctl._kernels import probe as kernel_probe
    from accelctl._kernels.cases import KernelCase

    calls: list[None] = []

    def conv(x: torch.Tensor) -> torch.Tensor:
        calls.append(None)
        if len(calls) > 1:
            raise NotImplementedError("convolution_overrideable not implemented")
        return x * 2

    fake = KernelCase("conv2d", "aten::convolution", lambda g: (torch.ones(2),), conv)
    probe_kernels = kernel_probe.probe_kernels
    monkeypatch.setattr(
        kernel_probe, "probe_kernels", lambda device, gaps: probe_kernels(device, gaps, [fake])
    )
    declared = accelctl.KernelGaps(never_fall_back=("aten::convolution_overrideable",))
    state = capabilities._Probe("cpu", None, lambda: declared)
    found = capabilities._run("kernels", state)
    assert not found.supported
    assert found.reason == (
        "missing or wrong on cpu: aten::convolution (forward); ACCELCTL_CPU_FALLBACK=1 runs none "
        "of them on the CPU"
    )
    (missing,) = found.missing_kernels
    assert (missing.op, missing.phase, missing.state, missing.cases) == (
        "aten::convolution", "forward", "missing", ("conv2d",)
    )  # fmt: skip
    assert found.kernel_gaps == declared
    assert found.to_dict()["kernel_gaps"]["never_fall_back"] == ["aten::convolution_overrideable"]


def test_a_kernel_gaps_hook_that_fails_is_said_and_the_kernels_are_probed() -> None:
    def broken() -> accelctl.KernelGaps:
        raise accelctl.AccelctlError("kernel_gaps() raised KeyError: 'openreg'")

    found = capabilities._run("kernels", capabilities._Probe("cpu", None, broken))
    assert found.supported and found.kernel_gaps is None
    assert found.reason.endswith(
        "(the plugin's kernel_gaps() failed, so none are declared: kernel_gaps() raised "
        "KeyError: 'openreg')"
    )

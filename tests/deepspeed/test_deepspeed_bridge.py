"""What ``import accelctl.integrations.deepspeed`` gives DeepSpeed, here and on an openreg device.

In this process (the CPU plugin: the test process loads no other backend) and in a process on one
torch_openreg 0.0.3 device (``occl_machine``).
"""

from __future__ import annotations

import types

import pytest
from openregmachine import UserMachine

import accelctl
from accelctl._deepspeed.refusals import norms_follow_device

deepspeed = pytest.importorskip("deepspeed")
bridge = pytest.importorskip("accelctl.integrations.deepspeed")


def test_importing_the_bridge_makes_deepspeeds_accelerator_the_plugins() -> None:
    chosen = deepspeed.accelerator.get_accelerator()
    assert chosen is bridge.ACCELERATOR
    assert isinstance(chosen, deepspeed.accelerator.abstract_accelerator.DeepSpeedAccelerator)
    assert chosen.handle.name == "cpu"
    assert chosen.communication_backend_name() == "gloo"  # the plugin's distributed_backend
    assert (chosen.device_name(), chosen.device_name(1)) == ("cpu", "cpu")  # as DeepSpeed's own
    assert chosen.is_synchronized_device() and chosen.Stream is None


def test_on_the_cpu_deepspeeds_own_cpu_builds_of_its_ops_are_used_and_rebound() -> None:
    from deepspeed.ops.adam import fused_adam
    from deepspeed.ops.op_builder import cpu

    chosen = deepspeed.accelerator.get_accelerator()
    assert chosen.get_op_builder("FusedAdamBuilder") is cpu.FusedAdamBuilder
    assert fused_adam.FusedAdamBuilder is cpu.FusedAdamBuilder
    assert deepspeed.ops.op_builder.CPUAdamBuilder is cpu.CPUAdamBuilder


def test_the_bridges_patches_are_recorded_and_undone() -> None:
    import torch

    from accelctl.integrations._deepspeed import initialize as _deepspeed_initialize
    from accelctl.integrations._deepspeed import ops as _deepspeed_ops
    from accelctl.integrations._deepspeed.adaptation import PATCHES

    rebound = PATCHES.applied()  # the import's: the builder names, on the CPU no initialize
    names = {patch.name for patch in rebound}
    assert {"FusedAdamBuilder", "CPUAdamBuilder", "FusedLambBuilder"} <= names
    assert "initialize" not in names and all(patch.why for patch in rebound)
    original = deepspeed.initialize
    on_meta = types.SimpleNamespace(process_device=torch.device("meta"))
    try:
        assert _deepspeed_initialize.wrap(on_meta)
        (wrapped,) = (patch for patch in PATCHES.applied() if patch.name == "initialize")
        assert (wrapped.original, wrapped.replacement) == (original, deepspeed.initialize)
        assert deepspeed.initialize.__wrapped__ is original
    finally:
        _deepspeed_initialize.restore()
    assert deepspeed.initialize is original
    _deepspeed_ops.restore()
    try:
        assert PATCHES.applied() == ()
        for patch in rebound:
            assert getattr(patch.owner, patch.name) is patch.original, patch.path
    finally:
        _deepspeed_ops.rebind()
    assert {patch.name for patch in PATCHES.applied()} == names


def test_deepspeeds_own_cpu_collectives_are_not_given_and_say_why() -> None:
    builder = deepspeed.accelerator.get_accelerator().create_op_builder("ShareMemCommBuilder")
    assert builder.is_compatible() is False  # DeepSpeed then skips it
    with pytest.raises(bridge.MissingOpError) as caught:
        builder.load()
    assert "ShareMemComm (ShareMemCommBuilder) has no build for accelctl accelerator 'cpu'" in (
        str(caught.value)
    )
    assert "the plugin's distributed backend carries the collectives" in str(caught.value)


def test_several_devices_in_a_process_started_alone_are_refused_with_the_launch_line() -> None:
    before = deepspeed.accelerator.get_accelerator()
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        bridge.use_plugin("cpu", 2)
    assert "needs one process per device, started by a launcher" in str(caught.value)
    assert deepspeed.accelerator.get_accelerator() is before  # refused before anything is set


ON_OPENREG = """
import json, os, socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                  MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
import deepspeed, torch
import accelctl, accelctl.integrations.deepspeed as bridge
from deepspeed.ops.adam import fused_adam
chosen = deepspeed.accelerator.get_accelerator()
x = torch.ones(256, device="openreg:0")
seen = {
    "same": chosen is bridge.ACCELERATOR,
    "names": [chosen.device_name(), chosen.device_name(1), chosen.current_device_name()],
    "backend": chosen.communication_backend_name(),
    "count": chosen.device_count(),
    "stream": chosen.Stream is torch.openreg.Stream,
    "event": chosen.Event is torch.openreg.Event,
    "allocated": chosen.memory_allocated() >= x.numel() * 4,
    "dtypes": [str(d) for d in chosen.supported_dtypes()],
    "fp64": chosen.is_fp64_supported(),
    "tensor": str(chosen.FloatTensor([1.0]).device),
    "on": [chosen.on_accelerator(x), chosen.on_accelerator(x.cpu())],
    "fused_compatible": fused_adam.FusedAdamBuilder().is_compatible(),
    "host_adam": chosen.get_op_builder("CPUAdamBuilder").__module__,
}
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
          "optimizer": {"type": "Adam", "params": {"lr": 0.01}}}
try:
    deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
except bridge.MissingOpError as exc:
    seen["refused"] = str(exc)
config["optimizer"]["params"]["torch_adam"] = True
engine, optimizer, _, _ = deepspeed.initialize(
    model=model, model_parameters=model.parameters(), config=config)
seen["torch_adam"] = [str(engine.device), type(optimizer.optimizer).__name__]
config["zero_optimization"]["stage"] = 3
try:
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config)
    seen["zero3"] = str(engine.device)
except accelctl.ProcessSetupError as exc:
    seen["zero3"] = str(exc)
# ZeRO-Offload that cannot run, refused before DeepSpeed's engine: CPUAdam to build on a machine
# without a C++ compiler; a torch optimizer without "zero_force_ds_cpu_optimizer": false.
config = {"train_micro_batch_size_per_gpu": 2,
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
          "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}
os.environ["CXX"] = "/nonexistent/c++"
seen["offload"] = []
for optimizer in (None, torch.optim.AdamW(model.parameters())):
    try:
        deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config,
                             optimizer=optimizer)
    except accelctl.ProcessSetupError as exc:
        seen["offload"].append(str(exc))
del os.environ["CXX"]
# bf16 without ACCELCTL_CPU_FALLBACK: openreg's abs runs float32 only; the overflow check calls it.
config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
          "bf16": {"enabled": True}}
model = torch.nn.Linear(4, 2)
engine, _, _, _ = deepspeed.initialize(
    model=model, optimizer=torch.optim.AdamW(model.parameters()), config=config)
engine.backward(engine(torch.ones(2, 4, device=engine.device, dtype=torch.bfloat16)).sum())
try:
    engine.step()
    seen["bf16"] = "ran"
except accelctl.MissingKernelError as exc:
    seen["bf16"] = [exc.op, exc.device, exc.fallback, str(exc)]
print(json.dumps(seen))
"""


@pytest.mark.openreg
@pytest.mark.slow
def test_on_openreg_the_accelerator_is_the_devices_and_fused_adam_is_refused_naming_the_fix(
    occl_machine: UserMachine,
) -> None:
    seen = occl_machine.python(ON_OPENREG, ACCELCTL_ACCELERATOR="openreg")
    assert seen["same"]
    assert seen["names"] == ["openreg", "openreg:1", "openreg:0"]
    assert (seen["backend"], seen["count"]) == ("occl", 2)
    assert seen["stream"] and seen["event"] and seen["allocated"]
    # bf16 and fp16 from the capability probe (its autocast casts to both); float64 norms it
    # cannot take (openreg's abs is float32 only), so DeepSpeed keeps its norms in float32.
    assert seen["dtypes"] == ["torch.float32", "torch.bfloat16", "torch.float16"]
    assert seen["fp64"] is False
    assert seen["tensor"] == "openreg:0"
    assert seen["on"] == [True, False]
    assert seen["fused_compatible"] is False
    assert seen["host_adam"].startswith("deepspeed.ops.op_builder.cpu")
    assert seen["refused"].startswith(
        "DeepSpeed's compiled op FusedAdam (FusedAdamBuilder) has no build for accelctl "
        "accelerator 'openreg' ('openreg' devices)"
    )
    assert '"torch_adam": true' in seen["refused"]
    assert seen["torch_adam"] == ["openreg:0", "AdamW"]  # adam_w_mode, its default
    if norms_follow_device():
        assert seen["zero3"] == "openreg:0"
    else:  # refused before it starts, not at the first step's float64 abs
        assert seen["zero3"].startswith(
            f"ZeRO stage 3 on accelctl accelerator 'openreg' (openreg:0): DeepSpeed "
            f"{deepspeed.__version__} computes ZeRO-3's gradient norms in float64"
        )
        assert "pip install 'deepspeed>=0.19.6', or use ZeRO stage 1 or 2" in seen["zero3"]
    cpu_adam, torch_optimizer = seen["offload"]
    assert cpu_adam.startswith(
        "ZeRO-Offload (offload_optimizer: cpu) on accelctl accelerator 'openreg' (openreg:0) with "
        '"optimizer": {"type": "AdamW"} steps with DeepSpeed\'s compiled op CPUAdam '
        "(CPUAdamBuilder), which DeepSpeed compiles on first use beside a plugin's device, and "
        "this machine has no C++ compiler ('/nonexistent/c++', from $CXX or else 'c++') on PATH."
    )
    assert '"zero_force_ds_cpu_optimizer": false' in cpu_adam and '"torch_adam": true' in cpu_adam
    assert torch_optimizer.startswith(
        "ZeRO-Offload (offload_optimizer: cpu) on accelctl accelerator 'openreg' (openreg:0) with "
        "a torch optimizer (AdamW): DeepSpeed refuses it unless the config sets "
        '"zero_force_ds_cpu_optimizer": false'
    )
    # bf16 stops at the first step's overflow check, naming the kernel openreg lacks in bf16 and
    # the fallback that runs it (test_openreg_deepspeed.py runs bf16 ZeRO with it). DeepSpeed 0.16
    # checks overflow in fp16 only (on a float32 copy): its bf16 step needs no bf16 abs, and runs.
    if seen["bf16"] == "ran":
        assert not norms_follow_device()  # an older release: the newest ones check bf16 too
        return
    op, device, fallback, said = seen["bf16"]
    assert (op, device, fallback) == ("aten::abs", "openreg:0", None)
    assert "ACCELCTL_CPU_FALLBACK=1" in said


def test_an_abstract_method_of_a_newer_deepspeed_is_named_before_anything_runs() -> None:
    import abc

    from accelctl.integrations._deepspeed.accelerator import PluginAccelerator, completed

    class Newer(PluginAccelerator):  # as a release that added a method to the interface
        @abc.abstractmethod
        def frobnicate(self) -> None: ...

    with pytest.raises(accelctl.ProcessSetupError) as caught:
        completed(Newer)
    assert str(caught.value).startswith(
        f"DeepSpeed {deepspeed.__version__}'s DeepSpeedAccelerator declares methods the accelctl "
        "bridge does not implement: frobnicate. The bridge is tested with deepspeed 0.16 to 0.19"
    )
    # The installed release's whole interface is implemented (0.16's older methods added).
    assert not completed(PluginAccelerator).__abstractmethods__

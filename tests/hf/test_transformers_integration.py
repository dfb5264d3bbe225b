"""accelctl.integrations.transformers: transformers' Trainer on accelctl plugins, in this process.

The real cpu plugin, and class-based plugins whose devices are ``meta`` tensors, as a real NPU's are
not CPUs. Real devices and several processes: tests/openreg/test_openreg_transformers.py.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from anotherrelease import META_ACCELERATOR, refused_import, run_scenario
from bridgepatching import assert_enabled_and_undone
from fakeaccelerators import TWO_PROCESSES, MetaAccelerator

import accelctl

# Imported by _imported, when a test here runs, not when pytest collects this file: importing
# transformers' TrainingArguments costs seconds of CPU, in every pytest-xdist worker otherwise.
transformers: Any = None
AcceleratorState: Any = None
GradientState: Any = None
PartialState: Any = None
Accelerator: Any = None
TrainingArguments: Any = None
bridge: Any = None
_transformers_state: Any = None


@pytest.fixture(autouse=True, scope="module")
def _imported() -> None:
    global transformers, AcceleratorState, GradientState, PartialState, Accelerator
    global TrainingArguments, bridge, _transformers_state
    import accelerate.state
    import transformers as imported

    from accelctl.integrations import accelerate as accelerate_bridge
    from accelctl.integrations import transformers as transformers_bridge
    from accelctl.integrations._transformers import state as adaptation

    transformers = imported
    bridge = transformers_bridge
    _transformers_state = adaptation
    TrainingArguments = transformers_bridge.TrainingArguments
    Accelerator = accelerate_bridge.Accelerator
    AcceleratorState = accelerate.state.AcceleratorState
    GradientState = accelerate.state.GradientState
    PartialState = accelerate.state.PartialState


@pytest.fixture(autouse=True)
def _fresh_accelerate_state(_imported: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start and end every test without Accelerate's process-wide state or a launcher's variables.

    Nor Accelerate's variables from the caller's environment.
    """
    for name in (*TWO_PROCESSES, "ACCELERATE_TORCH_DEVICE", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    for name in ("ACCELERATE_MIXED_PRECISION", "ACCELCTL_ACCELERATOR", "ACCELCTL_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def arguments(tmp_path: Path, cls: Any = None, **kwargs: Any) -> Any:
    """Arguments for a short run (the bridge's by default): nothing saved, reported or logged."""
    return (cls or TrainingArguments)(
        str(tmp_path / "out"),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=0.01,
        seed=0,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
        **kwargs,
    )


def tiny_gpt2() -> tuple[Any, list[dict[str, torch.Tensor]]]:
    """A 2-layer GPT-2 with a 16-dim embedding, tied to its output layer, and 32 sequences."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=16,
        n_head=2,
        vocab_size=32,
        n_positions=16,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 32, (32, 8), generator=torch.Generator().manual_seed(0))
    return model, [{"input_ids": row, "labels": row} for row in tokens]


def test_enable_records_its_patches_and_undo_puts_transformers_own_back() -> None:
    assert bridge.ADAPTED
    # Accelerate's two are the Accelerate bridge's patches (its own test undoes them).
    assert_enabled_and_undone(
        lambda: tuple(p for p in bridge.enable() if p.bridge == "transformers"),
        _transformers_state.PATCHES,
        ["transformers.Trainer._move_model_to_device", "transformers.Trainer.train"],
    )
    assert _transformers_state.is_active()
    assert {p.bridge for p in bridge.enable()} == {"transformers", "accelerate"}


def test_the_cpu_plugin_trains_as_transformers_own_cpu_run(tmp_path: Path) -> None:
    args = arguments(tmp_path, accelerator="cpu", bf16=True)
    assert isinstance(args, transformers.TrainingArguments)
    assert args.accelctl_accelerator.name == "cpu"
    assert (args.device, args.n_gpu, args.use_cpu) == (torch.device("cpu"), 0, True)
    model, data = tiny_gpt2()
    dtypes = []  # inside the forward that Accelerate autocasts
    mlp = model.transformer.h[0].mlp.c_fc
    mlp.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    trainer = transformers.Trainer(model, args, train_dataset=data)
    assert trainer.accelerator.mixed_precision == "bf16"
    trainer.train()
    assert set(dtypes) == {torch.bfloat16}
    ours = {key: value.clone() for key, value in model.state_dict().items()}

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    own_args = arguments(tmp_path, transformers.TrainingArguments, use_cpu=True, bf16=True)
    own, data = tiny_gpt2()
    transformers.Trainer(own, own_args, train_dataset=data).train()
    for key, value in own.state_dict().items():
        assert torch.equal(ours[key], value), key
    assert not torch.equal(ours["lm_head.weight"], tiny_gpt2()[0].lm_head.weight)  # trained


def test_a_non_cpu_plugin_device_becomes_the_arguments_device(tmp_path: Path) -> None:
    plugin = MetaAccelerator()
    args = arguments(tmp_path, accelerator=plugin, devices="1,")
    assert args.device == args.distributed_state.device == torch.device("meta", 1)
    assert (args.n_gpu, args.world_size, args.use_cpu) == (1, 1, False)
    assert args.parallel_mode == transformers.training_args.ParallelMode.NOT_PARALLEL
    assert plugin.set_up == ["meta:1"]  # made current through the plugin's setup_device
    assert args.accelctl_accelerator.name == "metaacc"


def test_the_trainer_moves_a_model_keeping_its_tied_weights(tmp_path: Path) -> None:
    model, _ = tiny_gpt2()
    trainer = transformers.Trainer(model, arguments(tmp_path, accelerator=MetaAccelerator()))
    assert trainer.accelerator.device == torch.device("meta", 0)
    assert model.lm_head.weight.device.type == "meta"
    # meta tensors, like openreg's, cannot take a CPU tensor's place: model.to() would untie.
    assert model.lm_head.weight is model.transformer.wte.weight


def test_other_arguments_move_the_model_as_transformers_does(tmp_path: Path) -> None:
    own = arguments(tmp_path, transformers.TrainingArguments, use_cpu=True)
    model, _ = tiny_gpt2()
    trainer = transformers.Trainer(model, own)
    trainer._move_model_to_device(model, torch.device("meta"))
    assert model.lm_head.weight is not model.transformer.wte.weight  # transformers' own move


def test_several_processes_without_a_backend_are_refused_when_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(accelctl.ProcessSetupError) as info:
        arguments(tmp_path, accelerator=MetaAccelerator())
    message = str(info.value)
    assert "'metaacc' runs in a single process only (its distributed_backend is None)" in message
    assert "would train each process alone" in message
    assert not PartialState._shared_state  # refused before Accelerate made any state


def test_several_devices_without_a_launcher_are_refused_with_the_command(tmp_path: Path) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as info:
        arguments(tmp_path, accelerator=MetaAccelerator("fakeccl"), devices="2")
    assert "accelctl launch --accelerator metaacc --devices 2 <your script>" in str(info.value)


def test_bf16_on_a_device_type_without_autocast_is_refused(tmp_path: Path) -> None:
    with pytest.raises(accelctl.ProcessSetupError, match="no autocast for 'meta'"):
        arguments(tmp_path, accelerator=MetaAccelerator(), bf16=True)
    assert not PartialState._shared_state


def test_use_cpu_is_accelctls_choice(tmp_path: Path) -> None:
    with pytest.raises(accelctl.ProcessSetupError, match="use accelerator='cpu'"):
        arguments(tmp_path, accelerator=MetaAccelerator(), use_cpu=True)


def test_deepspeed_without_deepspeed_installed_names_the_extra(tmp_path: Path) -> None:
    # DeepSpeed runs through the bridge in the DeepSpeed sessions (tests/deepspeed); this
    # session has no DeepSpeed, which the arguments say before any state is made.
    # The distribution, not the module: tests/deepspeed, on the path here, is a namespace.
    if list(importlib.metadata.distributions(name="deepspeed")):
        pytest.skip("DeepSpeed is installed: tests/deepspeed runs it through this bridge")
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'accelctl\[deepspeed\]'"):
        arguments(tmp_path, accelerator="cpu", deepspeed={"train_batch_size": 4})
    assert not PartialState._shared_state


def test_a_state_made_before_that_does_not_match_is_refused(tmp_path: Path) -> None:
    PartialState(cpu=True)  # as transformers' own TrainingArguments would, earlier
    with pytest.raises(accelctl.ProcessSetupError) as info:
        arguments(tmp_path, accelerator=MetaAccelerator())
    message = str(info.value)
    assert "runs process 0 of 1 on meta:0, but Accelerate's state is process 0 of 1 on cpu" in (
        message
    )
    assert "Make these TrainingArguments first" in message
    assert PartialState().device == torch.device("cpu")  # left as it was, not dropped


def test_a_bridge_accelerator_made_first_is_used_and_kept(tmp_path: Path) -> None:
    plugin = MetaAccelerator()
    accelerator = Accelerator(plugin)
    args = arguments(tmp_path, accelerator=plugin)
    assert args.device == accelerator.device == torch.device("meta", 0)
    assert accelerator.state.initialized  # transformers' own arguments would reset it
    assert plugin.set_up == ["meta:0"]  # set up once, by the Accelerator


def test_a_bridge_accelerator_made_after_the_arguments_is_accepted(tmp_path: Path) -> None:
    plugin = MetaAccelerator()
    args = arguments(tmp_path, accelerator=plugin)
    assert Accelerator(plugin).device == args.device


def test_arguments_made_twice_share_the_state(tmp_path: Path) -> None:
    plugin = MetaAccelerator()
    first = arguments(tmp_path, accelerator=plugin)
    second = arguments(tmp_path, accelerator=plugin)
    assert first.device == second.device and first.distributed_state.initialized


def test_a_state_replaced_after_the_arguments_is_refused_when_the_trainer_is_made(
    tmp_path: Path,
) -> None:
    args = arguments(tmp_path, accelerator=MetaAccelerator())
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState(cpu=True)  # as other arguments made since would
    model, _ = tiny_gpt2()
    with pytest.raises(accelctl.ProcessSetupError) as info:
        transformers.Trainer(model, args)
    assert "it was replaced after these TrainingArguments were made" in str(info.value)
    assert model.lm_head.weight.device.type == "cpu"  # refused before it moved


def test_the_arguments_pickle_as_the_trainer_saves_them(tmp_path: Path) -> None:
    args = arguments(tmp_path, accelerator="cpu")
    loaded = pickle.loads(pickle.dumps(args))
    assert (loaded.accelerator, loaded.device) == ("cpu", torch.device("cpu"))
    assert loaded.accelctl_accelerator.name == "cpu"


def test_the_command_line_parser_takes_the_new_fields(tmp_path: Path) -> None:
    parser = transformers.HfArgumentParser(TrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--accelerator", "cpu", "--devices", "auto"]
    )
    assert (args.accelerator, args.devices, args.device.type) == ("cpu", "auto", "cpu")


#: Import the bridge after ``{change}`` (a release newer than the window, or one whose internal
#: changed), then make arguments on the CPU plugin and on a ``meta`` device.
ANOTHER_TRANSFORMERS = (
    """
import json, warnings
import transformers
{change}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from accelctl.integrations import transformers as bridge
imported_wrapped = hasattr(transformers.Trainer._move_model_to_device, "__accelctl_adapted__")
"""
    + META_ACCELERATOR
    + """

cpu = bridge.TrainingArguments("out", accelerator="cpu", report_to=[])  # transformers' own: cpu
cpu_device = str(cpu.device)
from accelerate.state import AcceleratorState  # the state is the process's: made anew below
AcceleratorState._reset_state(reset_partial_state=True)
try:
    meta = str(bridge.TrainingArguments("out", accelerator=Meta(), report_to=[]).device)
except accelctl.ProcessSetupError as error:
    meta = str(error)
print(json.dumps({{
    "adapted": bridge.ADAPTED,
    "wrapped": hasattr(transformers.Trainer._move_model_to_device, "__accelctl_adapted__"),
    "imported_wrapped": imported_wrapped,
    "cpu": cpu_device,
    "meta": meta,
    "warnings": [str(w.message) for w in caught if "accelctl" in str(w.message)],
}}))
"""
)


def _another_transformers(change: str, cwd: Path) -> dict[str, Any]:
    return run_scenario(ANOTHER_TRANSFORMERS.format(change=change), cwd)


@pytest.mark.slow
def test_a_newer_transformers_with_the_same_internals_is_adapted_with_one_warning(
    tmp_path: Path,
) -> None:
    result = _another_transformers('transformers.__version__ = "5.99.0"', tmp_path)
    assert (result["adapted"], result["wrapped"], result["cpu"]) == (True, True, "cpu")
    assert result["imported_wrapped"] is False  # the bridge's TrainingArguments enabled it
    assert result["meta"] == "meta:0"  # the plugin's device, not transformers' CPU
    (warning,) = result["warnings"]
    assert "tested with transformers 5.21 to 5.25, not 5.99.0" in warning


@pytest.mark.slow
def test_a_changed_internal_is_refused_when_the_bridge_is_imported() -> None:
    # What a release whose Trainer moves the model with other arguments looks like to the bridge.
    result = refused_import(
        "transformers",
        "import transformers",
        "transformers.Trainer._move_model_to_device = lambda self, model: None",
        probe="hasattr(transformers.Trainer.train, '__accelctl_adapted__')",
    )
    refused = str(result["refused"])
    assert refused.startswith(
        f"accelctl.integrations.transformers cannot run on transformers "
        f"{transformers.__version__}: transformers.Trainer._move_model_to_device has changed: it "
        "takes (self, model), the bridge passes (self, model, device)"
    )
    assert (
        "The bridge is tested with transformers 5.21 to 5.25: pip install "
        "'transformers>=5.21,<5.26' installs a tested release (pip install "
        "'accelctl[transformers]' the newest)"
    ) in refused
    assert str(result["raised_in"]).endswith(os.path.join("_shared", "versions.py"))
    assert (result["probe"], result["warnings"]) == (False, [])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("missing", "says"),
    [("transformers", "pip install 'accelctl[transformers]'")],
)
def test_without_transformers_the_import_error_says_what_to_install(
    missing: str, says: str
) -> None:
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "try:\n    import accelctl.integrations.transformers\n"
        "except ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n"
    )
    # A hang guard: one import of torch.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.strip().split(" | ")
    assert name.split(".")[0] == missing
    assert "pip install 'accelctl[transformers]'" in message and says in message


class _KnownAsItsDevice(MetaAccelerator):
    """A plugin that answers to its device type, so messages name it by that type.

    As the generic privateuse1 plugin answers to ``openreg``.
    """

    name = "privatemeta"
    aliases = ("meta",)


def test_a_refusal_names_the_accelerator_as_the_user_knows_it(tmp_path: Path) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        arguments(tmp_path, accelerator=_KnownAsItsDevice(), use_cpu=True)
    message = str(refused.value)
    assert (
        "use_cpu=True asks for the CPU, but accelctl accelerator 'meta' runs on meta:0" in message
    )
    assert "privatemeta" not in message


# -- issue 45: a kernel the device lacks stops Trainer.train with MissingKernelError -------------


class _LackingModel(torch.nn.Module):
    """A causal LM's interface whose second layer meets a kernel the device lacks.

    Or raises ``error``.
    """

    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__()
        lacking = NotImplementedError(
            "Could not run 'aten::frobnicate' with arguments from the 'Meta' backend."
        )
        self.embed = torch.nn.Embedding(8, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), _Raising(error or lacking)])

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        hidden = self.embed(input_ids)
        for block in self.blocks:
            hidden = block(hidden)
        return {"loss": hidden.sum()}


class _Raising(torch.nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        raise self.error


def _tokens() -> list[dict[str, torch.Tensor]]:
    rows = torch.zeros(8, 4, dtype=torch.long)
    return [{"input_ids": row, "labels": row} for row in rows]


@pytest.fixture
def _kernels_set_up_afresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start each test without set_up_kernels' per-process work, keeping the process's excepthook.

    accelctl's one line replaces the excepthook once it raised; it is put back as it was.
    """
    from accelctl._kernels import setup

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    setup.forget()
    yield
    setup.forget()


@pytest.mark.usefixtures("_kernels_set_up_afresh")
def test_the_arguments_set_the_devices_kernels_up(tmp_path: Path) -> None:
    from accelctl._kernels import setup

    args = arguments(tmp_path, accelerator=MetaAccelerator())
    assert args.device == torch.device("meta", 0)  # the state made, then the kernels set up
    done = setup.setup_for("meta")
    assert done is not None and (done.accelerator, done.fallback) == ("metaacc", "off")


@pytest.mark.usefixtures("_kernels_set_up_afresh")
def test_a_kernel_the_device_lacks_stops_train_with_the_layer_named(tmp_path: Path) -> None:
    trainer = transformers.Trainer(
        _LackingModel(), arguments(tmp_path, accelerator=MetaAccelerator()), train_dataset=_tokens()
    )
    with pytest.raises(accelctl.MissingKernelError) as info:
        trainer.train()
    error = info.value
    assert (error.op, error.layer, error.phase) == (
        "aten::frobnicate",
        "_Raising at blocks.1",
        "forward",
    )
    assert (error.device, error.accelerator) == ("meta:0", "metaacc")
    assert isinstance(error.__cause__, NotImplementedError)


@pytest.mark.usefixtures("_kernels_set_up_afresh")
def test_other_errors_leave_train_as_they_came(tmp_path: Path) -> None:
    raised = ValueError("the user's own")
    made = (
        lambda: arguments(tmp_path, accelerator=MetaAccelerator()),
        lambda: arguments(tmp_path, transformers.TrainingArguments, use_cpu=True),
    )
    for make in made:  # the bridge's arguments, and transformers' own
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        trainer = transformers.Trainer(_LackingModel(raised), make(), train_dataset=_tokens())
        with pytest.raises(ValueError) as info:
            trainer.train()
        assert info.value is raised


def test_train_is_adapted_keeping_transformers_own_signature() -> None:
    bridge.enable()
    train = transformers.Trainer.train
    assert getattr(train, "__accelctl_adapted__", False)
    assert "resume_from_checkpoint" in inspect.signature(train).parameters

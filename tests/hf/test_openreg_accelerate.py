"""HF Accelerate's ``Accelerator`` on accelctl's plugin for torch_openreg, in 1 and 2 processes.

Through ``accelctl.integrations.accelerate``, on torch_openreg 0.0.3 through the generic
``privateuse1`` plugin: one process (the plugin's device, ``bf16`` casting, ``save_state`` /
``load_state``, ``set_seed``), two processes under ``accelctl launch`` and under ``accelerate
launch`` (each on its own device, ``occl``, DDP, ``gather`` / ``reduce`` / ``wait_for_everyone``),
and the CPU plugin against Accelerate's own multi-CPU run. Four runs (``accelerate_run.py``), each a
fixture that the tests below read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from openregmachine import (
    REFUSED,
    UserMachine,
    assert_single_process_refusal,
    shared_run,
    succeeded,
    temporary_folder,
)
from rankresults import assert_equal, report, weights

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("accelerate")

SCRIPT = Path(__file__).parents[1] / "openreg" / "accelerate_run.py"


def _run(
    machine: UserMachine, factory: pytest.TempPathFactory, name: str, *argv: str, **extra: str
) -> Path:
    """``argv`` (a launcher's command) with the script, once per session (``shared_run``)."""

    def run(out: Path) -> None:
        # HF_HOME of its own: no `accelerate config` file of the machine's is read.
        command = [*argv[:-1], str(SCRIPT), str(out), *argv[-1].split()]
        environ = {"HF_HOME": str(out / "hf"), "TMPDIR": temporary_folder(out), **extra}
        succeeded(machine.run(*command, cwd=out, **environ))

    return shared_run(factory, name, run)


#: ``accelerate launch`` for 2 processes on a free port (its default, 29500, may be taken).
ACCELERATE_LAUNCH = (
    sys.executable, "-m", "accelerate.commands.launch",
    "--multi_gpu", "--num_processes", "2", "--main_process_port", "0",
)  # fmt: skip
ACCELCTL_LAUNCH = (
    sys.executable, "-m", "accelctl", "launch", "--accelerator", "openreg", "--devices", "2",
)  # fmt: skip


@pytest.fixture(scope="module")
def single(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(occl_machine, tmp_path_factory, "accelerate-single", sys.executable, "single")


@pytest.fixture(scope="module")
def launched(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``accelctl launch --accelerator openreg --devices 2``; the script says ``"auto"``."""
    name = "accelerate-accelctl-launch"
    return _run(occl_machine, tmp_path_factory, name, *ACCELCTL_LAUNCH, "processes auto")


@pytest.fixture(scope="module")
def accelerate_launched(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """``accelerate launch``, which knows nothing of accelctl; the script names ``"openreg"``."""
    name = "accelerate-launch"
    return _run(occl_machine, tmp_path_factory, name, *ACCELERATE_LAUNCH, "processes openreg")


@pytest.fixture(scope="module")
def cpus(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run Accelerate's own multi-CPU run, then accelctl's ``cpu`` plugin, without openreg loaded.

    Accelerate's ``wait_for_everyone`` on CPUs fails where another accelerator is torch's current
    one (docs/accelerate.md).
    """
    no_openreg = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return _run(
        occl_machine, tmp_path_factory, "accelerate-cpu", *ACCELERATE_LAUNCH, "cpu", **no_openreg
    )


def test_one_process_trains_on_the_plugins_device(single: Path) -> None:
    seen = report(single, "single")
    assert (seen["accelerator"], seen["adapted"]) == ("openreg", True)  # its one name
    assert (seen["device"], seen["distributed_type"]) == ("openreg:0", "DistributedType.NO")
    assert seen["trained"], "the optimizer made before prepare() must step the openreg model"


def test_bf16_mixed_precision_autocasts_on_the_plugins_device_type(single: Path) -> None:
    seen = report(single, "single")
    assert seen["mixed_precision"] == "bf16"
    assert seen["ran"] == [["openreg:0", "torch.bfloat16", True]]


def test_load_state_resumes_exactly_with_the_devices_random_state(single: Path) -> None:
    seen = report(single, "single")
    assert seen["resumed_exactly"]
    assert seen["device_rng_restored"]  # Accelerate saves no openreg generator: the bridge does


def test_set_seed_seeds_the_plugins_device(single: Path) -> None:
    first, second = report(single, "single")["seeded_draws"]
    assert first == second


@pytest.mark.parametrize("run", ["launched", "accelerate_launched"])
def test_each_process_runs_on_its_own_device_over_the_plugins_backend(
    run: str, request: pytest.FixtureRequest
) -> None:
    out: Path = request.getfixturevalue(run)
    for rank in (0, 1):
        seen = report(out, "processes", rank)
        assert (seen["accelerator"], seen["device"]) == ("openreg", f"openreg:{rank}")
        assert (seen["num_processes"], seen["process_index"]) == (2, rank)
        assert seen["distributed_type"] == "DistributedType.MULTI_GPU"
        assert seen["backend"] == seen["group_backend"] == "occl"
        assert seen["wrapped"] == "DistributedDataParallel"
        assert seen["ran"] == [[f"openreg:{rank}", "torch.float32", False]]
        assert (seen["gathered"], seen["sum"], seen["mean"]) == ([0, 1], 3.0, 1.5)
        assert seen["trained"]
    halves = [set(report(out, "processes", rank)["seen_epoch0"]) for rank in (0, 1)]
    assert len(halves[0]) == len(halves[1]) == 32 and halves[0] | halves[1] == set(range(64))


def test_both_launchers_train_to_the_weights_of_accelerates_own_cpu_run(
    launched: Path, accelerate_launched: Path, cpus: Path
) -> None:
    reference = weights(cpus, "own")
    for run in (launched, accelerate_launched):
        for rank in (0, 1):
            assert_equal(weights(run, "processes", rank), reference)


def test_the_cpu_plugin_equals_accelerates_own_multi_cpu_run(cpus: Path) -> None:
    for rank in (0, 1):
        own, plugin = report(cpus, "own", rank), report(cpus, "plugin", rank)
        assert plugin["accelerator"] == "cpu"
        for key in ("device", "distributed_type", "num_processes", "backend", "wrapped"):
            assert plugin[key] == own[key], key
        assert own["distributed_type"] == "DistributedType.MULTI_CPU" and own["trained"]
        assert plugin["seen_epoch0"] == own["seen_epoch0"]
        assert_equal(weights(cpus, "plugin", rank), weights(cpus, "own", rank))


def test_two_processes_without_a_backend_are_refused_when_the_accelerator_is_made(
    no_backend_machine: UserMachine,
) -> None:
    # torch_openreg 0.0.1: torch maps no backend to openreg, so privateuse1 has none.
    message = no_backend_machine.python(
        REFUSED
        + """
    from accelctl.integrations.accelerate import Accelerator
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    print(json.dumps(refused(lambda: Accelerator("openreg"))))
    """
    )
    assert_single_process_refusal(message)


# -- issue 45: kernels torch_openreg lacks, through the bridge's Accelerator ---------------------
#
# A small CNN (torch_openreg has no convolution: its ``convolution_overrideable`` refuses), 4
# steps of SGD with ``Accelerator("auto")``; ``ACCELCTL_ACCELERATOR`` and
# ``ACCELCTL_CPU_FALLBACK`` choose.
FALLBACK = {"ACCELCTL_CPU_FALLBACK": "1"}
#: accelerate_run.py's steps (16 samples, 4 a batch).
STEPS = 4


@pytest.fixture(scope="module")
def cnn_fallback(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    name = "accelerate-cnn-fallback"
    return _run(occl_machine, tmp_path_factory, name, sys.executable, "cnn", **FALLBACK)


@pytest.fixture(scope="module")
def cnn_cpu(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cpu = {"ACCELCTL_ACCELERATOR": "cpu"}
    return _run(occl_machine, tmp_path_factory, "accelerate-cnn-cpu", sys.executable, "cnn", **cpu)


def test_a_convolution_without_the_fallback_is_a_missing_kernel_error_naming_the_layer(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    succeeded(occl_machine.run(sys.executable, str(SCRIPT), str(tmp_path), "cnn", cwd=tmp_path))
    seen = report(tmp_path, "cnn")
    assert seen["parts"] == {
        "op": "aten::convolution",
        "kernel": "aten::convolution_overrideable",
        "layer": "Conv2d at features.0",
        "device": "openreg:0",
        "accelerator": "privateuse1",
        "phase": "forward",
        "fallback": None,
        "switch": "ACCELCTL_CPU_FALLBACK=1",
        "cpu_way": None,  # no wording of its own: ACCELCTL_ACCELERATOR=cpu
    }
    assert seen["cause"] == "NotImplementedError"  # torch's error, kept as __cause__
    assert seen["error"] == (
        "aten::convolution has no kernel for openreg:0 (plugin privateuse1), called by Conv2d at "
        'features.0: to train on the CPU, pass accelerator="cpu" (or set ACCELCTL_ACCELERATOR=cpu)'
        "; to run the kernels the device lacks on the CPU, set ACCELCTL_CPU_FALLBACK=1 in the "
        "environment"
    )


def test_a_convolution_with_the_fallback_trains_to_the_cpu_weights(
    cnn_fallback: Path, cnn_cpu: Path
) -> None:
    seen = report(cnn_fallback, "cnn")
    assert (seen["accelerator"], seen["device"], seen["trained"]) == (
        "openreg",
        "openreg:0",
        True,
    )
    # The convolution's forward and its backward, once a step each, on the CPU's kernels; the
    # linear layer's matmuls are openreg's, bit-equal to the CPU's: the same weights exactly.
    assert seen["cpu_fallback_calls"] == 2 * STEPS
    assert report(cnn_cpu, "cnn")["device"] == "cpu"
    assert_equal(weights(cnn_fallback, "cnn"), weights(cnn_cpu, "cnn"))


def test_an_undefined_gradient_is_named_from_the_loss_in_backward(
    machine: UserMachine, tmp_path: Path
) -> None:
    # The third-party plugin declares no gaps: torch_openreg's placeholder attention runs, and
    # its backward leaves the gradients undefined ("tensor does not have a device", which names
    # no operator); Accelerator.backward names it from the loss's graph.
    environ = {"ACCELCTL_ACCELERATOR": "openreg"}
    done = machine.run(
        sys.executable, str(SCRIPT), str(tmp_path), "attention", cwd=tmp_path, **environ
    )
    assert (tmp_path / "attention" / "rank0.json").exists(), done.stderr[-4000:]
    seen = report(tmp_path, "attention")
    assert seen["accelerator"] == "openreg"
    assert seen["parts"] == {
        "op": "aten::scaled_dot_product_attention",
        "kernel": "aten::_scaled_dot_product_fused_attention_overrideable_backward",
        "layer": None,  # the autograd engine's error: no module's forward on its traceback
        "device": "openreg:0",
        "accelerator": "openreg",
        "phase": "backward",
        "fallback": None,
        "switch": "ACCELCTL_CPU_FALLBACK=1",
        "cpu_way": None,  # no wording of its own: ACCELCTL_ACCELERATOR=cpu
    }
    assert seen["cause"] == "RuntimeError"

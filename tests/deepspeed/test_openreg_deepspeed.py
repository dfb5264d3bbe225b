"""ZeRO-1, 2 and 3 on 2 openreg devices end bit for bit with the same runs on 2 CPU processes.

``import accelctl.integrations.deepspeed`` then ``deepspeed.initialize`` under ``accelctl launch
--devices 2``: on torch_openreg 0.0.3 devices over ``occl`` (each process on its own device),
against CPU processes over gloo (openreg's kernels are the host's), in float32 and in bf16 (the one
kernel openreg lacks in bf16, abs, run on the CPU by ``ACCELCTL_CPU_FALLBACK=1``); a run cut by
``save_checkpoint`` / ``load_checkpoint`` resumes to the uncut run's weights, and a checkpoint
written on openreg resumes on the CPU processes. Two launches (``deepspeed_run.py``, both stages one
after the other in the same processes), each a fixture the tests read, and the docs' block.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import torch
from openregmachine import UserMachine, shared_run, succeeded, temporary_folder
from rankresults import assert_equal, report, weights

from accelctl._deepspeed.refusals import norms_follow_device

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("deepspeed")

SCRIPT = Path(__file__).parent / "deepspeed_run.py"
#: ZeRO-3 on openreg, which has no float64 abs, needs a DeepSpeed whose ZeRO-3 norms follow the
#: device (0.19.6); before it, the bridge refuses it (test_deepspeed_bridge.py).
STAGES = (1, 2, 3) if norms_follow_device() else (1, 2)
#: Each stage in float32, then in bf16 (``"bf16": {"enabled": true}``). torch_openreg 0.0.3's abs
#: runs float32 only, and DeepSpeed's bf16 overflow check calls it (``isfinite``): the openreg
#: launch runs with ACCELCTL_CPU_FALLBACK=1, which runs abs on the CPU (the privateuse1 plugin
#: declares it ``partial``); without it the run stops with MissingKernelError
#: (test_deepspeed_bridge.py).
#: And ZeRO-2 and 3 with ZeRO-Offload (the optimizer's state, and ZeRO-3's parameters, on the
#: CPU), the torch optimizer stepping there (``"zero_force_ds_cpu_optimizer": false``).
OFFLOADED = tuple(f"{stage}-offload" for stage in STAGES if stage > 1)
RUNS = (*map(str, STAGES), *(f"{stage}-bf16" for stage in STAGES), *OFFLOADED)


def _launch(
    machine: UserMachine,
    factory: pytest.TempPathFactory,
    accelerator: str,
    *more: str,
    **extra: str,
) -> Path:
    """Launch ``deepspeed_run.py`` on 2 devices of ``ACCELERATOR``, once per session.

    ``accelctl launch --accelerator ACCELERATOR --devices 2 deepspeed_run.py``; the script itself
    asks for nothing but the bridge's import.
    """

    def run(out: Path) -> None:
        command = (
            sys.executable, "-m", "accelctl", "launch", "--accelerator", accelerator,
            "--devices", "2", str(SCRIPT), str(out), ",".join(RUNS), *more,
        )  # fmt: skip
        succeeded(machine.run(*command, cwd=out, TMPDIR=temporary_folder(out), **extra))

    return shared_run(factory, f"deepspeed-{accelerator}", run)


@pytest.fixture(scope="module")
def openreg(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _launch(occl_machine, tmp_path_factory, "openreg", ACCELCTL_CPU_FALLBACK="1")


@pytest.fixture(scope="module")
def cpus(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory, openreg: Path
) -> Path:
    """Run on the CPU plugin, on a machine without the openreg backend loaded.

    It also resumes the openreg run's cut checkpoints.
    """
    no_openreg = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return _launch(occl_machine, tmp_path_factory, "cpu", str(openreg), **no_openreg)


@pytest.mark.parametrize("run", RUNS)
def test_each_process_trains_on_its_own_openreg_device_over_occl(openreg: Path, run: str) -> None:
    bf16 = run.endswith("-bf16")
    for rank in (0, 1):
        seen = report(openreg, f"zero{run}", rank)
        assert (seen["rank"], seen["world_size"]) == (rank, 2)
        assert seen["device"] == seen["parameter_device"] == f"openreg:{rank}"
        assert (seen["accelerator"], seen["accelctl"]) == ("PluginAccelerator", "openreg")
        assert seen["backend"] == "occl"
        assert seen["dtype"] == ("torch.bfloat16" if bf16 else "torch.float32")
        # What ran on the CPU in the device's place: abs only (every call of it, float32 ones
        # too: a kernel cannot hand some dtypes back to the device's own).
        assert set(seen["cpu_fallback_calls"]) <= {"aten::abs"}
        if bf16:
            assert seen["cpu_fallback_calls"]["aten::abs"] > 0


@pytest.mark.parametrize("run", RUNS)
def test_openreg_ends_with_the_weights_of_the_same_run_on_two_cpu_processes(
    openreg: Path, cpus: Path, run: str
) -> None:
    """The openreg runs equal the CPU runs bit for bit, bf16 included.

    openreg's kernels are the host's, and the one it lacks in bf16 (abs) runs on the CPU.
    """
    for rank in (0, 1):
        seen = report(cpus, f"zero{run}", rank)
        assert (seen["device"], seen["accelctl"], seen["backend"]) == ("cpu", "cpu", "gloo")
        assert seen["cpu_fallback_calls"] is None  # no fallback asked for
        assert report(openreg, f"zero{run}", rank)["losses"] == seen["losses"]
    reference = weights(cpus, f"zero{run}", 0)
    assert_equal(weights(cpus, f"zero{run}", 1), reference)  # the ranks agree
    for rank in (0, 1):
        assert_equal(weights(openreg, f"zero{run}", rank), reference)
    # It trained: four steps, four losses.
    losses = report(cpus, f"zero{run}", 0)["losses"]
    assert len(losses) == 4 and len(set(losses)) == 4


@pytest.mark.parametrize("run", OFFLOADED)
def test_offloading_the_optimizer_to_the_cpu_ends_with_the_weights_of_the_run_without(
    openreg: Path, cpus: Path, run: str
) -> None:
    stage = run.partition("-")[0]
    reference = weights(cpus, f"zero{stage}", 0)
    for out in (openreg, cpus):
        for rank in (0, 1):
            assert (
                report(out, f"zero{run}", rank)["losses"]
                == report(out, f"zero{stage}", rank)["losses"]
            )
            assert_equal(weights(out, f"zero{run}", rank), reference)


@pytest.mark.parametrize("stage", RUNS)
def test_a_run_cut_by_save_and_load_checkpoint_resumes_to_the_uncut_runs_weights(
    openreg: Path, cpus: Path, stage: str
) -> None:
    run = f"zero{stage}"
    reference = weights(cpus, run, 0)
    for out in (openreg, cpus):
        for rank in (0, 1):
            seen = report(out, run, rank)
            assert seen["resumed_steps"] == 2  # load_checkpoint restored the step count
            assert seen["resumed_losses"] == seen["losses"]
            resumed = torch.load(out / run / f"resumed-rank{rank}.pt", weights_only=True)
            assert_equal(resumed, reference)


@pytest.mark.parametrize("stage", RUNS)
def test_a_checkpoint_written_on_openreg_resumes_on_two_cpu_processes(
    cpus: Path, stage: str
) -> None:
    run = f"zero{stage}"
    reference = weights(cpus, run, 0)
    for rank in (0, 1):
        crossed = torch.load(cpus / run / f"crossed-rank{rank}.pt", weights_only=True)
        assert_equal(crossed, reference)
        assert report(cpus, run, rank)["crossed_losses"] == report(cpus, run, rank)["losses"][2:]


DOCS = Path(__file__).parents[2] / "docs" / "deepspeed.md"
MARKER = "<!-- tests/deepspeed/test_openreg_deepspeed.py runs the next block -->"


def test_the_docs_script_runs_as_it_stands_under_the_docs_launch_line(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    after = DOCS.read_text().split(MARKER, 1)[1]
    script = after.split("```python\n", 1)[1].split("```", 1)[0]
    line = after.split("```bash\n", 1)[1].split("```", 1)[0].strip()
    (tmp_path / "train.py").write_text(script)
    argv = shlex.split(line)
    assert argv[:2] == ["accelctl", "launch"] and argv[-1] == "train.py"
    done = succeeded(
        occl_machine.run(
            sys.executable, "-m", *argv, cwd=tmp_path, TMPDIR=temporary_folder(tmp_path)
        )
    )
    said = done.stdout + done.stderr
    for rank in (0, 1):
        assert f"rank {rank} trained on openreg:{rank}, loss " in said


# -- the other ways users start DeepSpeed: torchrun and DeepSpeed's own launcher ---------------


def _started_by(
    machine: UserMachine, factory: pytest.TempPathFactory, name: str, *launcher: str
) -> Path:
    """Run ZeRO-2 on openreg under ``launcher``, which knows nothing of accelctl.

    ``ACCELCTL_ACCELERATOR`` says which plugin, as a user's environment would.
    """

    def run(out: Path) -> None:
        command = (*launcher, str(SCRIPT), str(out), "2")
        chosen = {"ACCELCTL_ACCELERATOR": "openreg"}
        succeeded(machine.run(*command, cwd=out, TMPDIR=temporary_folder(out), **chosen))

    return shared_run(factory, name, run)


@pytest.fixture(scope="module")
def torchrun(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2")  # fmt: skip
    return _started_by(occl_machine, tmp_path_factory, "deepspeed-torchrun", *launcher)


@pytest.fixture(scope="module")
def deepspeed_launcher(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    launcher = (str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "2",
                "--master_port", str(_free_port()))  # fmt: skip
    return _started_by(occl_machine, tmp_path_factory, "deepspeed-launcher", *launcher)


class TestOtherLaunchers:
    """A class of its own: pytest-xdist runs it beside the module's other tests."""

    @pytest.mark.parametrize("launched", ["torchrun", "deepspeed_launcher"])
    def test_each_process_trains_on_its_own_device_to_the_accelctl_launch_runs_weights(
        self, launched: str, openreg: Path, request: pytest.FixtureRequest
    ) -> None:
        out: Path = request.getfixturevalue(launched)
        reference = weights(openreg, "zero2", 0)
        for rank in (0, 1):
            seen = report(out, "zero2", rank)
            assert (seen["device"], seen["backend"]) == (f"openreg:{rank}", "occl")
            assert seen["losses"] == report(openreg, "zero2", rank)["losses"]
            assert_equal(weights(out, "zero2", rank), reference)


def _free_port() -> int:
    """A port free now (DeepSpeed's launcher takes no 0)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

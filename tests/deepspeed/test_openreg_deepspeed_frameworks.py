"""DeepSpeed started by Lightning, Accelerate and transformers on openreg equals the CPU's runs.

Lightning (``strategy="deepspeed_stage_2"`` / ``3``), Accelerate
(``Accelerator(deepspeed_plugin=...)``) and transformers (``TrainingArguments(deepspeed=...)``)
through their accelctl bridges, under ``accelctl launch --devices 2``: on 2 torch_openreg 0.0.3
devices over ``occl`` each run trains on ``openreg:0`` / ``openreg:1`` and ends with the weights and
losses of the same run on 2 CPU processes of the CPU plugin, bit for bit (openreg's kernels are the
host's). Two launches (``frameworks_run.py``: every framework and stage one after the other in the
same processes), each a fixture the tests read; the openreg launch also runs the scripts of
docs/deepspeed.md's section on the frameworks, as they stand.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from openregmachine import UserMachine, shared_run, succeeded, temporary_folder
from rankresults import assert_equal, report, weights

from accelctl._deepspeed.refusals import norms_follow_device

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

# The sessions that run this folder install the three frameworks too (noxfile.py): one missing
# fails the launches, not skips them (and none is imported here, in each pytest worker).
pytest.importorskip("deepspeed")

SCRIPT = Path(__file__).parent / "frameworks_run.py"
FRAMEWORKS = ("lightning", "accelerate", "transformers")
#: ZeRO-3 on openreg needs a DeepSpeed whose ZeRO-3 norms follow the device (0.19.6); before it
#: the bridge refuses it (test_deepspeed_bridge.py).
STAGES = (2, 3) if norms_follow_device() else (2,)
RUNS = [f"{framework}-{stage}" for framework in FRAMEWORKS for stage in STAGES]

DOCS = Path(__file__).parents[2] / "docs" / "deepspeed.md"
MARKER = "<!-- tests/deepspeed/test_openreg_deepspeed_frameworks.py runs the next "


def docs_scripts() -> tuple[str, list[str]]:
    """Return docs/deepspeed.md's launch line and its three scripts.

    Lightning's, Accelerate's and transformers'.
    """
    blocks = [part.split("\n", 1)[1] for part in DOCS.read_text().split(MARKER)[1:]]
    line = blocks[0].split("```bash\n", 1)[1].split("```", 1)[0].strip()
    scripts = [block.split("```python\n", 1)[1].split("```", 1)[0] for block in blocks[1:]]
    return line, scripts


def _launch(
    machine: UserMachine,
    factory: pytest.TempPathFactory,
    accelerator: str,
    *scripts: str,
    **extra: str,
) -> Path:
    """Launch ``frameworks_run.py`` on 2 devices of ``ACCELERATOR``, once per session.

    ``accelctl launch --accelerator ACCELERATOR --devices 2 frameworks_run.py``; its output goes to
    ``OUT/output.txt``.
    """

    def run(out: Path) -> None:
        files = []
        for number, script in enumerate(scripts):
            (out / f"docs{number}").mkdir()
            files.append(out / f"docs{number}" / "train.py")
            files[-1].write_text(script)
        command = (
            sys.executable, "-m", "accelctl", "launch", "--accelerator", accelerator,
            "--devices", "2", str(SCRIPT), str(out), accelerator, ",".join(RUNS), *map(str, files),
        )  # fmt: skip
        done = machine.run(*command, cwd=out, TMPDIR=temporary_folder(out), **extra)
        (out / "output.txt").write_text(done.stdout + done.stderr)
        succeeded(done)

    return shared_run(factory, f"deepspeed-frameworks-{accelerator}", run)


@pytest.fixture(scope="module")
def openreg(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every run on openreg, then the docs' scripts."""
    return _launch(occl_machine, tmp_path_factory, "openreg", *docs_scripts()[1])


@pytest.fixture(scope="module")
def cpus(occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every run on the CPU plugin, on a machine without the openreg backend loaded."""
    no_openreg = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return _launch(occl_machine, tmp_path_factory, "cpu", **no_openreg)


@pytest.mark.parametrize("run", RUNS)
def test_each_process_trains_on_its_own_openreg_device_over_occl(openreg: Path, run: str) -> None:
    framework, _, stage = run.partition("-")
    for rank in (0, 1):
        seen = report(openreg, run, rank)
        assert (seen["rank"], seen["world_size"], seen["stage"]) == (rank, 2, int(stage))
        assert (seen["engine"], seen["device"]) == ("DeepSpeedEngine", f"openreg:{rank}")
        assert seen["ran"] == [[f"openreg:{rank}", f"openreg:{rank}"]]  # inputs and weights
        assert (seen["accelerator"], seen["accelctl"]) == ("PluginAccelerator", "openreg")
        assert seen["backend"] == "occl"
        if framework == "lightning":
            assert (seen["strategy"], seen["root_device"]) == ("DeepSpeedStrategy", seen["device"])
        else:
            assert seen["distributed_type"] == "DistributedType.DEEPSPEED"
        if framework == "transformers":
            assert seen["args_device"] == seen["device"]
            assert seen["clipping"] == (1.0 if stage == "2" else 0.0)  # max_grad_norm


@pytest.mark.parametrize("run", RUNS)
def test_openreg_ends_with_the_weights_of_the_same_run_on_two_cpu_processes(
    openreg: Path, cpus: Path, run: str
) -> None:
    for rank in (0, 1):
        seen = report(cpus, run, rank)
        assert (seen["device"], seen["accelctl"], seen["backend"]) == ("cpu", "cpu", "gloo")
        assert seen["ran"] == [["cpu", "cpu"]]
        assert report(openreg, run, rank)["losses"] == seen["losses"]
    reference = weights(cpus, run, 0)
    assert_equal(weights(cpus, run, 1), reference)  # the ranks agree
    for rank in (0, 1):
        assert_equal(weights(openreg, run, rank), reference)
    # It trained: four steps, four losses, and weights other than the initial ones.
    losses = report(cpus, run, 0)["losses"]
    assert len(losses) == 4 and len(set(losses)) == 4


def test_the_docs_scripts_train_on_each_openreg_device_under_the_docs_launch_line(
    openreg: Path,
) -> None:
    line, scripts = docs_scripts()
    assert len(scripts) == 3
    argv = shlex.split(line)
    # The line the fixture ran them under, as the docs write it.
    assert argv == ["accelctl", "launch", "--accelerator", "openreg", "--devices", "2", "train.py"]
    said = (openreg / "output.txt").read_text()
    for framework in FRAMEWORKS:
        for rank in (0, 1):
            assert f"{framework}: rank {rank} trained on openreg:{rank}" in said

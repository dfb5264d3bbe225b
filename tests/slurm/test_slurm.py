"""accelctl on a real SLURM cluster (``conftest.py``): two nodes on this machine, CPU and gloo.

Every way SLURM starts the processes of a run trains the same weights as one machine's
``accelctl launch --cpu --devices 2``: ``accelctl launch`` under ``srun`` on 2 nodes x 1 process,
``srun python`` on 1 node x 2 tasks and on 2 nodes x 1 task. A job step whose tasks do not match
the devices is refused (2 tasks, ``devices=3``); a batch job sent SIGUSR1 checkpoints, requeues
itself and ends with the weights of an uninterrupted run. Timeouts are hang guards only.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cluster import JOB_TIMEOUT_S, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SCRIPT = Path(__file__).parent / "train_script.py"
PYTHON = sys.executable


@pytest.fixture(scope="session")
def reference(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run ``accelctl launch --cpu --devices 2`` on one machine, outside SLURM, once per run.

    The first worker that needs it makes it; the others wait for it under a lock.
    """
    base = tmp_path_factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = folder / "slurm-reference"
    with (folder / "slurm-reference.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "final.pt").exists():
            out.mkdir(exist_ok=True)
            env = slurm_cluster.environ()
            command = [PYTHON, "-m", "accelctl", "launch", "--cpu", "--devices", "2"]
            done = subprocess.run(
                [*command, str(SCRIPT), str(out)],
                capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT_S,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
    return out


def assert_same_weights(run: Path, reference: Path) -> None:
    ours = torch.load(run / "final.pt", weights_only=True)
    theirs = torch.load(reference / "final.pt", weights_only=True)
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key


def places(run: Path) -> list[dict[str, object]]:
    return [json.loads(path.read_text()) for path in sorted(run.glob("rank*.json"))]


def test_accelctl_launch_under_srun_takes_two_nodes_from_the_job(
    slurm_cluster: SlurmCluster, reference: Path, tmp_path: Path
) -> None:
    done = slurm_cluster.run(
        "srun", "--nodes=2", "--ntasks-per-node=1",
        PYTHON, "-m", "accelctl", "launch", "--cpu", "--devices", "1", str(SCRIPT), str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_weights(tmp_path, reference)
    assert [(p["rank"], p["world_size"], p["node"]) for p in places(tmp_path)] == [
        (0, 2, "accelctl-node1"),
        (1, 2, "accelctl-node2"),
    ]
    # One line per node says what was taken from where.
    notes = sorted(line for line in done.stderr.splitlines() if "accelctl launch: SLURM" in line)
    assert len(notes) == 2, done.stderr
    assert notes[0].startswith("accelctl launch: SLURM job ")
    assert (
        ": node 0 of 2 (SLURM_NODEID, SLURM_STEP_NUM_NODES); rendezvous at accelctl-node1:"
        in (notes[0])
    )
    assert "(host from SLURM_STEP_NODELIST=accelctl-node[1-2], port from SLURM_JOB_ID)" in notes[0]


@pytest.mark.parametrize(
    ("shape", "devices", "nodes"),
    [
        (["--nodes=1", "--ntasks-per-node=2"], "2", 1),
        (["--nodes=2", "--ntasks-per-node=1"], "auto", 2),
    ],
    ids=["1-node-x-2-tasks", "2-nodes-x-1-task"],
)
def test_srun_python_without_a_launcher_trains_as_one_run(
    slurm_cluster: SlurmCluster,
    reference: Path,
    tmp_path: Path,
    shape: list[str],
    devices: str,
    nodes: int,
) -> None:
    done = slurm_cluster.run("srun", *shape, PYTHON, str(SCRIPT), str(tmp_path), devices)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_weights(tmp_path, reference)
    ran = places(tmp_path)
    assert [(p["rank"], p["world_size"]) for p in ran] == [(0, 2), (1, 2)]
    assert len({p["node"] for p in ran}) == nodes  # any free node(s) of the cluster


def test_a_hung_task_of_srun_python_is_named_with_every_ranks_stack(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Without a launcher: the rendezvous store is rank 0's, the processes on two nodes."""
    done = slurm_cluster.run(
        "srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        PYTHON, str(SCRIPT), str(tmp_path), "auto", "--hang",
        ACCELCTL_COLLECTIVE_TIMEOUT="3",
    )  # fmt: skip
    assert done.returncode != 0
    # Rank 0's one line (issue 46, item 2), the stacks under it, no traceback.
    assert "accelctl: rank 1 of 2 did not arrive: rank 0 waited 3 s for it in " in (done.stderr), (
        done.stderr[-3000:]
    )
    assert "CollectiveTimeoutError" not in done.stderr, done.stderr[-3000:]
    hung = done.stderr[done.stderr.index("rank 1 of 2 (pid ") :]
    assert "in training_step of step 3:" in hung.splitlines()[0]
    assert "time.sleep(600)" in hung


def test_tasks_that_do_not_match_the_devices_are_refused_when_the_trainer_is_made(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    done = slurm_cluster.run(
        "srun", "--nodes=1", "--ntasks-per-node=2", PYTHON, str(SCRIPT), str(tmp_path), "3"
    )
    assert done.returncode != 0
    # Every task refuses, before any rendezvous; the line is task 0's alone, no traceback
    # (issue 46, item 2).
    refusals = [line for line in done.stderr.splitlines() if line.startswith("accelctl: srun")]
    assert len(refusals) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    refusal = refusals[0].removeprefix("accelctl: ")
    assert refusal.startswith("srun (SLURM job "), refusal
    assert refusal.split("step 0) ", 1)[1] == (
        "started 2 process(es) on this machine but the Trainer has 3 cpu device(s) (cpu, cpu, "
        'cpu). Leave devices="auto" in the script to take one device per process, or '
        "srun --ntasks-per-node=3 (ACCELCTL_DEBUG=1 shows the traceback)"
    )
    assert not list(tmp_path.glob("rank*.json"))


def test_accelctl_launch_refuses_one_task_per_device_under_srun(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    done = slurm_cluster.run(
        "srun", "--nodes=1", "--ntasks-per-node=2",
        PYTHON, "-m", "accelctl", "launch", "--cpu", "--devices", "2", str(SCRIPT), str(tmp_path),
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.count("this SLURM job step has 2 tasks on this node") == 2, done.stderr
    assert "srun --ntasks-per-node=1 accelctl launch" in done.stderr
    assert not list(tmp_path.glob("rank*.json"))  # nothing was launched


def test_only_a_job_step_is_read_not_an_allocation_or_a_batch_script(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    probe = (
        "from accelctl._choice.process_environment import ProcessEnvironment as P; import os; "
        "e = P.from_environ(os.environ); print(e.launcher or 'alone', e.rank, e.world_size)"
    )
    step = slurm_cluster.run("srun", "--nodes=1", "--ntasks=2", PYTHON, "-c", probe)
    tasks = sorted(step.stdout.strip().splitlines(), key=lambda line: line[-3:])
    assert len(tasks) == 2 and all(t.startswith("srun (SLURM job ") for t in tasks), step.stderr
    assert tasks[0].endswith(", step 0) 0 2") and tasks[1].endswith(", step 0) 1 2"), tasks
    allocation = slurm_cluster.run("salloc", "--nodes=2", "--ntasks=2", PYTHON, "-c", probe)
    assert allocation.stdout.strip() == "alone 0 1", allocation.stderr
    out = tmp_path / "batch.out"
    job = slurm_cluster.sbatch(
        "--nodes=2", "--ntasks=2", f"--output={out}", "--wait", f'--wrap={PYTHON} -c "{probe}"'
    )
    assert slurm_cluster.job_state(job) == "COMPLETED"
    assert out.read_text().strip() == "alone 0 1"


def test_sigusr1_checkpoints_requeues_and_resumes_to_the_same_weights(
    slurm_cluster: SlurmCluster, reference: Path, tmp_path: Path
) -> None:
    log = tmp_path / "job.out"
    job = slurm_cluster.sbatch(
        "--requeue", "--nodes=1", "--ntasks-per-node=2", f"--output={log}", "--open-mode=append",
        f"--wrap=srun {PYTHON} {SCRIPT} {tmp_path} auto --pace",
    )  # fmt: skip
    running = tmp_path / "running"
    slurm_cluster.wait_for(job, "RUNNING")
    deadline = time.monotonic() + JOB_TIMEOUT_S  # a hang guard
    while not running.exists() and time.monotonic() < deadline:
        assert slurm_cluster.job_state(job) in ("RUNNING", "PENDING"), log.read_text()
        time.sleep(0.1)
    signalled = slurm_cluster.run("scancel", "--signal=USR1", str(job))
    assert signalled.returncode == 0, signalled.stderr
    (tmp_path / "signalled").touch()  # the job goes on, a step each 0.3 s, until it stops
    state = slurm_cluster.wait_for(job, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    assert state == "COMPLETED", log.read_text()
    output = log.read_text()
    assert f"SLURM job {job} requeued, it resumes from there" in output, output
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    stops = [line for line in lines if line["kind"] == "requeue"]
    assert len(stops) == 1 and stops[0]["step"] < 12, lines
    assert {line["restart"] for line in lines} == {0, 1}  # the requeued job resumed
    assert lines[-1]["kind"] == "epoch" and lines[-1]["step"] == 12
    assert_same_weights(tmp_path, reference)

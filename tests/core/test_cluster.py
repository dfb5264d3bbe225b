"""SLURM's variables read without a cluster: host lists, tasks per node, what a job step is."""

from __future__ import annotations

import pytest

from accelctl import AccelctlError
from accelctl._choice.cluster import PORT_BASE, expand_hostlist, slurm_step, tasks_on_node


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("node7", ["node7"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a-b.c[1,3],d", ["a-b.c1", "a-b.c3", "d"]),
    ],
)
def test_host_lists_expand_as_scontrol_show_hostnames_does(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist", ["", "gpu[01-02", "a,,b", "a[2-1]", "a[x]", "a[1-]", "a]"])
def test_a_host_list_that_breaks_the_syntax_is_named(hostlist: str) -> None:
    with pytest.raises(AccelctlError, match="SLURM's host list"):
        expand_hostlist(hostlist)


def test_tasks_per_node_reads_slurms_repeat_counts() -> None:
    assert [tasks_on_node("2(x3),1", node) for node in range(4)] == [2, 2, 2, 1]
    with pytest.raises(AccelctlError, match="lists 2 node"):
        tasks_on_node("1(x2)", 2)
    with pytest.raises(AccelctlError, match="cannot read"):
        tasks_on_node("two", 0)


#: What srun sets in the second task of `srun -N2 --ntasks-per-node=1` in job 4242.
STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NUM_NODES": "4",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_STEP_NODELIST": "gpu[03-04]",
    "SLURM_JOB_NODELIST": "gpu[01-04]",
}


def test_a_job_step_is_read_from_the_steps_own_variables_first() -> None:
    step = slurm_step(STEP)
    assert step is not None
    assert (step.job_id, step.step_id, step.rank, step.local_rank) == (4242, 0, 1, 0)
    assert (step.tasks, step.tasks_on_node, step.nodes, step.node_rank) == (2, 1, 2, 1)
    assert (step.master_addr, step.master_port) == ("gpu03", PORT_BASE + 4242)
    assert step.master_from == "host from SLURM_STEP_NODELIST=gpu[03-04], port from SLURM_JOB_ID"
    both = slurm_step({**STEP, "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "1234"})
    assert both is not None and (both.master_addr, both.master_port) == ("10.0.0.9", 1234)
    assert both.master_from == "host from MASTER_ADDR, port from MASTER_PORT"


@pytest.mark.parametrize(
    "environ",
    [
        {},
        # sbatch's batch script: the job's shape, but no step
        {key: value for key, value in STEP.items() if "STEP" not in key},
        # salloc: an allocation, no task variables at all
        {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "n[1-2]"},
        # the interactive step of LaunchParameters=use_interactive_step, and the batch step
        {**STEP, "SLURM_STEP_ID": "4294967290"},
        {**STEP, "SLURM_STEP_ID": "4294967291"},
    ],
    ids=["no-slurm", "batch-script", "salloc", "interactive-step", "batch-step"],
)
def test_only_a_task_of_an_srun_step_is_a_job_step(environ: dict[str, str]) -> None:
    assert slurm_step(environ) is None


def test_a_step_variable_that_is_not_a_number_is_named() -> None:
    with pytest.raises(AccelctlError, match="SLURM_PROCID='x' is not a whole number"):
        slurm_step({**STEP, "SLURM_PROCID": "x"})
    with pytest.raises(AccelctlError, match="MASTER_PORT='http' is not a whole number"):
        slurm_step({**STEP, "MASTER_PORT": "http"})

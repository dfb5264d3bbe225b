"""Schedulers that start the processes of a run: what the Trainer and ``accelctl launch`` read.

The variables are given as a scheduler sets them (no cluster needed; ``tests/slurm`` runs the
same on a real SLURM): torchrun's, a Kubeflow PyTorchJob's, Open MPI's, a SLURM job step's, and
torchrun's own ``PET_*``. The last test starts two processes, a PyTorchJob's and an mpirun's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import accelctl
from accelctl._choice.cluster import PORT_BASE
from accelctl._choice.process_environment import ProcessEnvironment
from accelctl._launching.options import NodeOptionError, Nodes, plan_nodes
from accelctl._launching.scripts import torchrun_argv
from accelctl._training.processes import choose_device
from accelctl.cli.main import cli

#: A SLURM job step of 2 nodes x 1 task (job 77), seen from its second task.
SLURM_STEP = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_STEP_NODELIST": "node[1-2]",
}
OMPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}


def places(environ: dict[str, str]) -> tuple[object, ...]:
    env = ProcessEnvironment.from_environ(environ)
    return (env.launcher, env.rank, env.local_rank, env.world_size, env.local_world_size,
            env.master_addr, env.master_port)  # fmt: skip


def test_each_scheduler_is_read_in_order_torchrun_first() -> None:
    torchrun = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    assert places(torchrun) == ("torchrun", 1, 1, 2, 2, None, None)
    # Kubeflow's PyTorchJob: one process per pod, no LOCAL_RANK
    pytorchjob = {
        "RANK": "2",
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "job-master-0",
        "MASTER_PORT": "23456",
    }
    assert places(pytorchjob) == ("torchrun", 2, 0, 3, 1, "job-master-0", 23456)
    mpi = {**OMPI, "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
    assert places(mpi) == ("mpirun", 3, 1, 4, 2, "h0", 29500)
    slurm = places(SLURM_STEP)
    assert slurm == ("srun (SLURM job 77, step 0)", 1, 0, 2, 1, "node1", PORT_BASE + 77)
    # accelctl launch's children under srun carry both: torchrun's variables win
    assert places({**SLURM_STEP, **torchrun})[0] == "torchrun"
    assert places({**SLURM_STEP, **mpi})[0] == "mpirun"
    # RANK alone (a variable of the shell's) is nobody's
    assert places({"RANK": "3"}) == ("", 0, 0, 1, 1, None, None)


def test_mpi_without_a_rendezvous_address_says_how_to_give_one() -> None:
    with pytest.raises(accelctl.ProcessSetupError, match="-x MASTER_ADDR=<first host>"):
        ProcessEnvironment.from_environ(OMPI)


def test_srun_tasks_that_do_not_match_the_devices_name_both_numbers() -> None:
    three_tasks = {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "3",
                   "SLURM_STEP_NUM_NODES": "1", "SLURM_NODEID": "0"}  # fmt: skip
    env = ProcessEnvironment.from_environ(three_tasks)
    selection = accelctl.resolve("cpu", devices=2)
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        choose_device(selection, env=env, launch_command_line="")
    assert str(caught.value) == (
        "srun (SLURM job 77, step 0) started 3 process(es) on this machine but the Trainer has 2 "
        'cpu device(s) (cpu, cpu). Leave devices="auto" in the script to take one device per '
        "process, or srun --ntasks-per-node=2"
    )


def test_the_trainer_refuses_the_mismatch_when_it_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "4"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)")
    with pytest.raises(accelctl.ProcessSetupError, match=r"started 2 process.*has 3 cpu device"):
        accelctl.Trainer(accelerator="cpu", devices=3)
    trainer = accelctl.Trainer(accelerator="cpu")  # "auto": one device per task
    assert (trainer.global_rank, trainer.world_size, len(trainer.devices)) == (1, 4, 2)


def test_launch_takes_the_machines_from_a_slurm_step_of_one_task_per_node() -> None:
    nodes = plan_nodes(environ=SLURM_STEP)
    assert (nodes.nnodes, nodes.node_rank, nodes.master_addr, nodes.master_port) == (
        2, 1, "node1", PORT_BASE + 77,
    )  # fmt: skip
    assert nodes.note == (
        "SLURM job 77 step 0: node 1 of 2 (SLURM_NODEID, SLURM_STEP_NUM_NODES); rendezvous at "
        f"node1:{PORT_BASE + 77} (host from SLURM_STEP_NODELIST=node[1-2], port from SLURM_JOB_ID)"
    )
    assert torchrun_argv(4, nodes, max_restarts=0) == [
        "--nproc-per-node", "4", "--nnodes", "2", "--max-restarts", "0", "--node-rank", "1",
        "--master-addr", "node1", "--master-port", str(PORT_BASE + 77), "--rdzv-id", "slurm-77.0",
    ]  # fmt: skip
    # Options that agree with the job, and an address or port of one's own, are taken as given.
    given = plan_nodes(2, 1, "10.0.0.5", 4321, environ=SLURM_STEP)
    assert (given.master_addr, given.master_port) == ("10.0.0.5", 4321)
    # One node: a local rendezvous on a free port, as without SLURM.
    one = {**SLURM_STEP, "SLURM_STEP_NUM_NODES": "1", "SLURM_NODEID": "0",
           "SLURM_STEP_TASKS_PER_NODE": "1"}  # fmt: skip
    assert plan_nodes(environ=one) == Nodes(
        note="SLURM job 77 step 0: node 0 of 1 (SLURM_NODEID, SLURM_STEP_NUM_NODES); one node, "
        "a local rendezvous"
    )
    assert plan_nodes(environ={}) == Nodes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nnodes", "3"], "Invalid value for --nnodes: 3 contradicts the SLURM job step this "
         "runs in (SLURM_STEP_NUM_NODES=2): leave --nnodes out under srun, it is read from the "
         "job"),
        (["--node-rank", "0"], "Invalid value for --node-rank: 0 contradicts the SLURM job step "
         "this runs in (SLURM_NODEID=1): leave --node-rank out under srun, it is read from the "
         "job"),
    ],
)  # fmt: skip
def test_launch_options_that_contradict_the_job_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], message: str
) -> None:
    for key, value in SLURM_STEP.items():
        monkeypatch.setenv(key, value)
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = CliRunner().invoke(cli, ["launch", "--cpu", *args, str(script)])
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())


def test_launch_refuses_several_tasks_per_node_instead_of_nesting_launches() -> None:
    two_tasks = {**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_TASKS": "4"}
    with pytest.raises(NodeOptionError) as caught:
        plan_nodes(environ=two_tasks)
    assert caught.value.option is None
    assert "this SLURM job step has 2 tasks on this node" in str(caught.value)
    assert "`srun --ntasks-per-node=2 python SCRIPT`" in str(caught.value)


def test_torchruns_own_pet_variables_reach_torchrun_untouched() -> None:
    pet = {"PET_NNODES": "1:4", "PET_RDZV_ENDPOINT": "job-master:29400", "PET_RDZV_BACKEND": "c10d"}
    nodes = plan_nodes(environ={**pet, **SLURM_STEP})
    assert nodes.from_torchrun_env
    assert nodes.note == (
        "the rendezvous is torchrun's own, from PET_NNODES, PET_RDZV_BACKEND, PET_RDZV_ENDPOINT"
    )
    # The processes per machine are accelctl's (one per device); the rest is torchrun's to read.
    assert torchrun_argv(2, nodes, max_restarts=0) == ["--nproc-per-node", "2"]
    assert torchrun_argv(2, nodes, max_restarts=3)[-2:] == ["--max-restarts", "3"]
    import torch.distributed.run as torchrun

    for key, value in pet.items():
        os.environ[key] = value
    try:
        args = torchrun.parse_args([*torchrun_argv(2, nodes, max_restarts=0), "x.py"])
    finally:
        for key in pet:
            del os.environ[key]
    assert (args.nnodes, args.rdzv_endpoint, args.rdzv_backend) == (
        "1:4",
        "job-master:29400",
        "c10d",
    )
    assert args.nproc_per_node == "2"


TRAIN = """
    import json, os, sys, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    import accelctl

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 1)
        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.linear(x), y)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    model = Net()
    trainer = accelctl.Trainer(accelerator="cpu", max_epochs=2, root_dir=sys.argv[1],
                               enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    print(json.dumps([trainer.global_rank, trainer.world_size, model.linear.weight.tolist()]))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_a_pytorchjob_pod_and_an_mpirun_task_meet_as_one_run(tmp_path: Path) -> None:
    """A PyTorchJob pod and an ``mpirun`` task meet as one run and both end with its weights.

    Each process is told where it sits by another scheduler's variables: rank 0 as a PyTorchJob pod
    (torch reads ``MASTER_*`` itself), rank 1 as an ``mpirun`` task (the Trainer passes the address
    on). One run of 2 forms.
    """
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    base = {key: value for key, value in os.environ.items() if not key.startswith("ACCELCTL_")}
    base.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    pod = {"RANK": "0", "WORLD_SIZE": "2"}
    task = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}  # fmt: skip
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            env={**base, **variables},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for variables in (pod, task)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=240)  # a hang guard
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [result[:2] for result in results] == [[0, 2], [1, 2]]
    assert results[0][2] == results[1][2]

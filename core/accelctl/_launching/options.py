"""The launch options checked before any process starts, before torch is imported.

The same words from ``accelctl launch`` and :func:`accelctl.launcher.launch_script`. The options
are the machines (from the options, else the scheduler: :func:`plan_nodes`) and the processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .._choice.cluster import slurm_step
from .._choice.distributed_backend import unusable_backend
from .._choice.selection import Selection
from .._contract.errors import LaunchError


class NodeOptionError(LaunchError):
    """Multi-machine options that cannot work together.

    :attr:`option` names the one at fault (None for a missing one), :attr:`problem` what is wrong
    with its value."""

    def __init__(self, problem: str, *, option: str | None = None) -> None:
        super().__init__(f"{option} {problem}" if option else problem)
        self.problem = problem
        self.option = option


def check_nodes(nnodes: int, node_rank: int, master_addr: str | None) -> None:
    """Refuse ``--nnodes``, ``--node-rank`` and ``--master-addr`` values that cannot form a group.

    A :class:`NodeOptionError` names the option and what it accepts."""
    if nnodes < 1:
        raise NodeOptionError(
            f"{nnodes} is below 1: give the number of machines taking part", option="--nnodes"
        )
    if not 0 <= node_rank < nnodes:
        relation = "below 0" if node_rank < 0 else f"not below --nnodes {nnodes}"
        raise NodeOptionError(
            f"{node_rank} is {relation} (machines are numbered 0 to {nnodes - 1})",
            option="--node-rank",
        )
    if nnodes > 1 and not master_addr:
        raise NodeOptionError(
            f"--nnodes {nnodes} needs --master-addr: the address of the machine started with "
            f"--node-rank 0, the same on every machine"
        )


def check_processes(selection: Selection, processes: int) -> None:
    """Refuse several processes on an accelerator that cannot carry them.

    It cannot without a distributed backend, or where torch does not have the backend for its
    devices. Refused before any process starts."""
    if processes <= 1:
        return
    name = selection.shown_name
    if selection.distributed_backend is None:
        raise LaunchError(
            f"accelerator {name!r} runs in a single process only (its distributed_backend is "
            f"None), but {processes} processes were asked for; use --devices 1 on one machine, "
            f"or another accelerator (--cpu for several CPU processes)"
        )
    refusal = unusable_backend(selection.accelerator, selection.devices[0].type, name)
    if refusal is not None:
        raise LaunchError(refusal)


@dataclass(frozen=True)
class Nodes:
    """The machines of one launch, and this one's place among them."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    #: torchrun's ``PET_*`` variables set the rendezvous: accelctl passes none of its own.
    from_torchrun_env: bool = False
    #: torchrun's run id (``TORCHELASTIC_RUN_ID`` in every process), when a scheduler gives one.
    run_id: str | None = None
    #: One line saying what was taken from where (None when nothing came from a scheduler).
    note: str | None = None


def torchrun_variables(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Return torchrun's own ``PET_*`` variables set in ``environ``, sorted.

    Where any is, torchrun's configuration is the user's (its rendezvous, unless an option names the
    machines, and its log folder)."""
    return sorted(name for name in environ if name.startswith("PET_"))


def plan_nodes(
    nnodes: int | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Nodes:
    """Plan the machines of a launch from the options, torchrun, SLURM or this machine alone.

    Options given win, then torchrun's ``PET_*`` variables, then a SLURM job step of one task per
    node, then this machine alone.

    :raises NodeOptionError: also for an option that contradicts the SLURM job step, or a step of
        several tasks per node (each would launch its own).
    """
    given = (nnodes, node_rank, master_addr, master_port) != (None,) * 4
    torchrun_env = torchrun_variables(environ)
    if torchrun_env and not given:
        note = f"the rendezvous is torchrun's own, from {', '.join(torchrun_env)}"
        return Nodes(from_torchrun_env=True, note=note)
    step = slurm_step(environ)
    if step is None:
        check_nodes(1 if nnodes is None else nnodes, node_rank or 0, master_addr)
        return Nodes(1 if nnodes is None else nnodes, node_rank or 0, master_addr, master_port)
    if step.tasks_on_node > 1:
        raise NodeOptionError(
            f"accelctl launch starts one process per device itself, so under srun it runs as one "
            f"task per node, but this SLURM job step has {step.tasks_on_node} tasks on this node: "
            f"run `srun --ntasks-per-node=1 accelctl launch ...`, or run the script without "
            f"accelctl launch (`srun --ntasks-per-node={step.tasks_on_node} python SCRIPT`: the "
            f"Trainer reads SLURM's variables)"
        )
    for option, value, theirs, variable in (
        ("--nnodes", nnodes, step.nodes, "SLURM_STEP_NUM_NODES"),
        ("--node-rank", node_rank, step.node_rank, "SLURM_NODEID"),
    ):
        if value is not None and value != theirs:
            raise NodeOptionError(
                f"{value} contradicts the SLURM job step this runs in ({variable}={theirs}): "
                f"leave {option} out under srun, it is read from the job",
                option=option,
            )
    where = f"SLURM job {step.job_id} step {step.step_id}: node {step.node_rank} of {step.nodes}"
    where += " (SLURM_NODEID, SLURM_STEP_NUM_NODES)"
    if step.nodes == 1:
        return Nodes(1, 0, master_addr, master_port, note=f"{where}; one node, a local rendezvous")
    addr, port = master_addr or step.master_addr, master_port or step.master_port
    source = "--master-addr/--master-port" if master_addr or master_port else step.master_from
    return Nodes(
        step.nodes,
        step.node_rank,
        addr,
        port,
        run_id=f"slurm-{step.job_id}.{step.step_id}",
        note=f"{where}; rendezvous at {addr}:{port} ({source})",
    )

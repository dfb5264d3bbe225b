"""What a cluster scheduler tells a process about its job: SLURM's job step, from its variables.

The step's own variables (``SLURM_STEP_NUM_NODES``, ...) come before the job's: a step may use
fewer nodes. Only a task inside a job step reads them: a batch script or ``salloc`` has the job's
variables too but is one process, which would wait for tasks that never start. ``SLURM_STEP_ID``
tells them apart: set by ``srun`` only, below SLURM's special steps (batch, extern, interactive).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .._contract.errors import ProcessSetupError

#: SLURM numbers its special steps (interactive, batch, extern, ...) from here up.
SPECIAL_STEPS_FROM = 0xFFFFFFFA
#: The rendezvous port of a job without ``MASTER_PORT``: ``PORT_BASE + job id % PORT_SPAN``,
#: below Linux's ephemeral ports (32768-60999), so that no outgoing connection holds it.
PORT_BASE, PORT_SPAN = 20000, 10000


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand SLURM's host list syntax, in order, as ``scontrol show hostnames`` does.

    ``"gpu[01-03,07],login1"`` gives ``gpu01, gpu02, gpu03, gpu07, login1`` (zero padding is kept;
    several bracket groups multiply: ``"r[1-2]n[1-2]"`` is ``r1n1, r1n2, r2n1, r2n2``).

    :raises ProcessSetupError: for a list that does not follow the syntax.
    """
    if not re.fullmatch(f"{_HOST}(?:,{_HOST})*", hostlist.strip()):
        raise ProcessSetupError(
            f"cannot read SLURM's host list {hostlist!r}: expected names and bracket ranges "
            f"such as 'gpu[01-04,07],login1'"
        )
    hosts: list[str] = []
    for name in re.findall(_HOST, hostlist):
        expanded = [""]
        for text, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", name):
            choices = [text + number for number in _numbers(ranges, hostlist)] if ranges else [text]
            expanded = [head + choice for head in expanded for choice in choices]
        hosts += expanded
    return hosts


#: One name of a host list: characters and bracket groups, no comma outside the brackets.
_HOST = r"(?:[^,\[\]\s]|\[[^\[\]]*\])+"


def _numbers(ranges: str, hostlist: str) -> list[str]:
    """``01-03,07`` as ``01, 02, 03, 07`` (the width of each range's first number is kept)."""
    numbers: list[str] = []
    for part in ranges.split(","):
        first, dash, last = part.strip().partition("-")
        last = last if dash else first
        if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
            raise ProcessSetupError(f"cannot read [{ranges}] in SLURM's host list {hostlist!r}")
        numbers += [str(n).zfill(len(first)) for n in range(int(first), int(last) + 1)]
    return numbers


def tasks_on_node(tasks_per_node: str, node: int) -> int:
    """The tasks of node ``node`` from SLURM's ``2(x3),1`` (three nodes of 2, one of 1)."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise ProcessSetupError(f"cannot read SLURM's tasks per node {tasks_per_node!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    if not 0 <= node < len(counts):
        raise ProcessSetupError(
            f"SLURM's tasks per node {tasks_per_node!r} lists {len(counts)} node(s), not {node}"
        )
    return counts[node]


@dataclass(frozen=True)
class SlurmStep:
    """The job step this task belongs to, as ``srun`` described it."""

    job_id: int
    step_id: int
    rank: int
    local_rank: int
    tasks: int
    tasks_on_node: int
    nodes: int
    node_rank: int
    #: ``MASTER_ADDR`` when set, else the first host of the step's node list; ``MASTER_PORT``
    #: when set, else one derived from the job id (the same on every node, without talking).
    master_addr: str
    master_port: int
    #: Where they came from, for a launcher's note.
    master_from: str


def slurm_step(environ: Mapping[str, str]) -> SlurmStep | None:
    """Return this task's SLURM job step, or None outside one.

    Outside one: a batch script, ``salloc``, no SLURM. A :class:`ProcessSetupError` for a SLURM
    variable that cannot be read."""
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID", "")).strip()
    if not step.isdigit() or int(step) >= SPECIAL_STEPS_FROM or "SLURM_JOB_ID" not in environ:
        return None

    def first(*names: str) -> tuple[str, str]:
        for name in names:
            if environ.get(name, "").strip():
                return name, environ[name].strip()
        raise ProcessSetupError(f"this SLURM job step sets none of {', '.join(names)}")

    def number(*names: str) -> int:
        name, raw = first(*names)
        if not raw.isdigit():
            raise ProcessSetupError(f"{name}={raw!r} is not a whole number")
        return int(raw)

    job, node_rank = number("SLURM_JOB_ID"), number("SLURM_NODEID")
    hosts = first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    addr_from = "MASTER_ADDR" if addr else f"{hosts[0]}={hosts[1]}"
    port_from = "MASTER_PORT" if port else "SLURM_JOB_ID"
    return SlurmStep(
        job_id=job,
        step_id=int(step),
        rank=number("SLURM_PROCID"),
        local_rank=number("SLURM_LOCALID"),
        tasks=number("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
        tasks_on_node=tasks_on_node(
            first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")[1], node_rank
        ),
        nodes=number("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
        node_rank=node_rank,
        master_addr=addr or expand_hostlist(hosts[1])[0],
        master_port=number("MASTER_PORT") if port else PORT_BASE + job % PORT_SPAN,
        master_from=f"host from {addr_from}, port from {port_from}",
    )

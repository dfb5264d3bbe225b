"""The launch options checked before any process starts: the machines and the processes.

``accelctl launch`` and :func:`accelctl.launcher.launch_script` share these checks (the CLI turns
a :class:`NodeOptionError` into a usage error on the option it names), so that an impossible
combination is refused once, with the same words, before torch is imported.
"""

from __future__ import annotations

from .._errors import LaunchError
from .._selection import Selection


class NodeOptionError(LaunchError):
    """Multi-machine options that cannot work together.

    ``str(error)`` is the whole sentence; :attr:`option` names the option at fault (None when the
    fault is a missing option) and :attr:`problem` says what is wrong with its value.
    """

    def __init__(self, problem: str, *, option: str | None = None) -> None:
        super().__init__(f"{option} {problem}" if option else problem)
        self.problem = problem
        self.option = option


def check_nodes(nnodes: int, node_rank: int, master_addr: str | None) -> None:
    """Refuse ``--nnodes``/``--node-rank``/``--master-addr`` values that cannot form a group.

    :raises NodeOptionError: naming the option and the values it accepts.
    """
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


def check_restarts(max_restarts: int) -> None:
    """Refuse a negative number of restarts."""
    if max_restarts < 0:
        raise LaunchError(f"max_restarts={max_restarts}: give a number of restarts >= 0")


def check_processes(selection: Selection, processes: int) -> None:
    """Refuse several processes on an accelerator without a distributed backend."""
    if processes > 1 and selection.distributed_backend is None:
        name = selection.accelerator.name
        raise LaunchError(
            f"accelerator {name!r} runs in a single process only (its distributed_backend is "
            f"None), but {processes} processes were asked for; use --devices 1 on one machine, "
            f"or another accelerator (--cpu for several CPU processes)"
        )

"""Where this process sits among the processes of one run, from the launcher's variables.

A launcher or scheduler starts one process per device and tells each where it sits. Read in this
order, the first that applies wins (``docs/training.md``, "Clusters", has the table):

1. torchrun's variables (``accelctl launch``, ``torchrun``, Kubeflow's PyTorchJob): ``RANK``,
   ``WORLD_SIZE``, with ``LOCAL_RANK`` (or, one process per machine, ``MASTER_ADDR``),
   ``LOCAL_WORLD_SIZE``; torch reads ``MASTER_ADDR`` / ``MASTER_PORT`` itself;
2. Open MPI's (``mpirun``): ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE``,
   with ``MASTER_ADDR`` and ``MASTER_PORT`` (MPI has no rendezvous address to give);
3. a SLURM job step (``srun python train.py``, :mod:`accelctl._choice.cluster`).

A process with none of them runs alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .._contract.errors import ProcessSetupError
from .cluster import slurm_step

#: Open MPI's names for rank, size, local rank and local size.
_OMPI = tuple(f"OMPI_COMM_WORLD_{n}" for n in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE"))


@dataclass(frozen=True)
class ProcessEnvironment:
    """Where this process sits: ranks and sizes as the launcher set them (defaults: alone)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    #: True when a launcher (torchrun) started this process.
    launched: bool = False
    #: Who started it, for messages: ``"torchrun"``, ``"mpirun"``, ``"srun"`` ("" alone).
    launcher: str = ""
    #: The rendezvous, where known (torch reads torchrun's from the environment itself).
    master_addr: str | None = None
    master_port: int | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProcessEnvironment:
        """Read the launcher's variables, in the order of the module's docstring.

        :raises ProcessSetupError: for a variable that is not a valid number, or an MPI run
            without ``MASTER_ADDR`` / ``MASTER_PORT``.
        """

        def number(name: str, default: int | None = None) -> int:
            raw = environ.get(name)
            if raw is None and default is not None:
                return default
            try:
                return int(str(raw).strip())
            except ValueError:
                raise ProcessSetupError(
                    f"the launcher's variable {name}={raw!r} is not a whole number; it is set by "
                    f"the launcher (torchrun, accelctl launch, mpirun, srun) and should not be "
                    f"set by hand"
                ) from None

        addr, port = environ.get("MASTER_ADDR") or None, environ.get("MASTER_PORT")
        if "RANK" in environ and "WORLD_SIZE" in environ and ("LOCAL_RANK" in environ or addr):
            world_size = number("WORLD_SIZE")
            alone_on_node = "LOCAL_RANK" not in environ  # a PyTorchJob: one process per pod
            env = cls(
                rank=number("RANK"),
                local_rank=number("LOCAL_RANK", default=0),
                world_size=world_size,
                local_world_size=number("LOCAL_WORLD_SIZE", 1 if alone_on_node else world_size),
                launched=True,
                launcher="torchrun",
                master_addr=addr,
                master_port=number("MASTER_PORT") if port else None,
            )
        elif _OMPI[0] in environ:
            if not (addr and port):
                raise ProcessSetupError(
                    "mpirun started this process (OMPI_COMM_WORLD_RANK is set) but MASTER_ADDR "
                    "and MASTER_PORT are not both set: torch.distributed needs them to meet; "
                    "pass them on, e.g. mpirun -x MASTER_ADDR=<first host> -x MASTER_PORT=29500"
                )
            rank, size, local, local_size = (number(name) for name in _OMPI)
            env = cls(rank, local, size, local_size, True, "mpirun", addr, number("MASTER_PORT"))
        elif (step := slurm_step(environ)) is not None:
            srun = f"srun (SLURM job {step.job_id}, step {step.step_id})"
            env = cls(step.rank, step.local_rank, step.tasks, step.tasks_on_node, True, srun,
                      step.master_addr, step.master_port)  # fmt: skip
        else:
            return cls()
        if not (0 <= env.rank < env.world_size and 0 <= env.local_rank < env.local_world_size):
            raise ProcessSetupError(
                f"inconsistent launcher variables ({env.launcher}): RANK={env.rank}, "
                f"WORLD_SIZE={env.world_size}, LOCAL_RANK={env.local_rank}, "
                f"LOCAL_WORLD_SIZE={env.local_world_size}"
            )
        return env

    @property
    def distributed(self) -> bool:
        """True when this run has several processes (on one machine or several)."""
        return self.world_size > 1

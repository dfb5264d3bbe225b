"""This process among the processes of one run: the launcher's variables, its device, the group.

``accelctl launch`` (and ``torchrun`` under it) starts one process per device and tells each
where it sits through the variables torchrun defines: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``. A process with none of them runs alone.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import ProcessSetupError

if TYPE_CHECKING:
    import torch

#: The variables that mark a process started by torchrun (all three must be set).
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class ProcessEnvironment:
    """Where this process sits: ranks and sizes as the launcher set them (defaults: alone)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    #: True when a launcher (torchrun) started this process.
    launched: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProcessEnvironment:
        """Read torchrun's variables; a process without all of :data:`LAUNCH_VARIABLES` is alone.

        :raises ProcessSetupError: for a variable that is not a valid number.
        """
        if not all(name in environ for name in LAUNCH_VARIABLES):
            return cls()

        def number(name: str, default: int | None = None) -> int:
            raw = environ.get(name)
            if raw is None and default is not None:
                return default
            try:
                return int(str(raw).strip())
            except ValueError:
                raise ProcessSetupError(
                    f"the launcher's variable {name}={raw!r} is not a whole number; it is set by "
                    f"torchrun / accelctl launch and should not be set by hand"
                ) from None

        world_size = number("WORLD_SIZE")
        env = cls(
            rank=number("RANK"),
            local_rank=number("LOCAL_RANK"),
            world_size=world_size,
            local_world_size=number("LOCAL_WORLD_SIZE", default=world_size),
            launched=True,
        )
        if not (0 <= env.rank < env.world_size and 0 <= env.local_rank < env.local_world_size):
            raise ProcessSetupError(
                f"inconsistent launcher variables: RANK={env.rank}, WORLD_SIZE={env.world_size}, "
                f"LOCAL_RANK={env.local_rank}, LOCAL_WORLD_SIZE={env.local_world_size}"
            )
        return env

    @property
    def distributed(self) -> bool:
        """True when this run has several processes (on one machine or several)."""
        return self.world_size > 1


def choose_device(
    devices: Sequence[torch.device],
    *,
    accelerator: str,
    backend: str | None,
    env: ProcessEnvironment,
    launch_command_line: str,
) -> torch.device:
    """This process's device: ``devices[LOCAL_RANK]``, after checking that the processes fit.

    :param devices: the selection's devices on this machine, one per process.
    :param accelerator: the accelerator's name, for messages.
    :param backend: its ``torch.distributed`` backend; None: one process only.
    :param env: this process's place among the processes.
    :param launch_command_line: what to run instead when several devices are used without a
        launcher.
    :raises ProcessSetupError: with what to do instead.
    """
    count = len(devices)
    if (count > 1 or env.distributed) and backend is None:
        asked = (
            f"{count} devices ({', '.join(str(d) for d in devices)})"
            if count > 1
            else f"{env.world_size} processes (started by a launcher)"
        )
        raise ProcessSetupError(
            f"accelerator {accelerator!r} runs in a single process only (its distributed_backend "
            f"is None), but {asked} were asked for. Train on one device (devices=1, without "
            f"`accelctl launch --devices N`), or pick an accelerator with a distributed backend, "
            f'such as accelerator="cpu" with devices=N'
        )
    if count > 1 and not env.launched:
        raise ProcessSetupError(
            f"devices={count} on {accelerator!r} needs one process per device, started by a "
            f"launcher; this process was started alone. Run:\n    {launch_command_line}"
        )
    if env.launched and env.local_world_size != count:
        raise ProcessSetupError(
            f"the launcher started {env.local_world_size} process(es) on this machine but the "
            f"Trainer has {count} {accelerator} device(s) ({', '.join(str(d) for d in devices)}). "
            f'Leave devices="auto" in the script to take the launcher\'s selection, or launch '
            f"with --devices matching the script"
        )
    return devices[env.local_rank if env.launched else 0]


def join_process_group(
    backend: str,
    env: ProcessEnvironment,
    device: torch.device,
    timeout: datetime.timedelta | None = None,
) -> bool:
    """Join the default ``torch.distributed`` process group of this run.

    Rendezvous through the launcher's ``MASTER_ADDR`` / ``MASTER_PORT``.

    :param timeout: how long each collective may wait for the other processes (None: torch's).

    :returns: True when this call created the group (and the caller destroys it), False when
        one already existed with the same size (a user's own set-up, or an earlier ``fit``).
    :raises ProcessSetupError: when torch has no ``torch.distributed``, or an existing group
        has another size.
    """
    import torch.distributed as dist

    if not dist.is_available():
        import torch

        raise ProcessSetupError(
            f"this torch build ({torch.__version__}) has no torch.distributed, which several "
            f"processes need; run on one device (devices=1)"
        )
    if dist.is_initialized():
        if dist.get_world_size() != env.world_size:
            raise ProcessSetupError(
                f"a torch.distributed process group of size {dist.get_world_size()} already "
                f"exists, but the launcher started {env.world_size} processes"
            )
        return False
    dist.init_process_group(
        backend=backend, rank=env.rank, world_size=env.world_size, timeout=timeout
    )
    return True


def script_argv() -> list[str] | None:
    """The command line of a script run with ``python script.py args``; None in a notebook, a
    REPL or ``python -c``, where there is no script to hand to ``accelctl launch``."""
    argv = list(sys.argv)
    if not argv or argv[0] in ("", "-c", "-") or not argv[0].endswith(".py"):
        return None
    return argv

"""This process among the processes of one run: its device and the process group.

Where it sits (rank, sizes) is read from the launcher's variables by
:class:`~accelctl._choice.process_environment.ProcessEnvironment`.
"""

from __future__ import annotations

import datetime
import sys
from typing import TYPE_CHECKING, Any

from .._choice.distributed_backend import NOTHING_STARTED, Started, unusable_backend
from .._choice.process_environment import ProcessEnvironment
from .._contract.errors import ProcessSetupError, warn_user
from .._launching.handoff import launch_command_line
from .timeouts import ENV_COLLECTIVE_TIMEOUT, CollectiveTimeoutError

if TYPE_CHECKING:
    import torch

    from .._choice.selection import Selection


def choose_device(
    selection: Selection,
    *,
    env: ProcessEnvironment,
    launch_command_line: str,
) -> torch.device:
    """Return this process's device, after checking that the processes fit.

    ``devices[LOCAL_RANK]``. It also checks that torch can carry the devices' tensors between
    them.

    :param selection: the accelerator and its devices on this machine, one per process.
    :param env: this process's place among the processes.
    :param launch_command_line: what to run instead when several devices are used without a
        launcher.
    :raises ProcessSetupError: with what to do instead.
    """
    devices, backend = selection.devices, selection.distributed_backend
    accelerator = selection.shown_name
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
    if count > 1 or env.distributed:  # before any process starts or joins a group
        # Under a launcher the processes are running (the launcher could not see an instance
        # made in the script): each says so; alone, none was started, nor will be suggested.
        started = Started(env.world_size, env.launcher) if env.launched else NOTHING_STARTED
        refusal = unusable_backend(selection.accelerator, devices[0].type, accelerator, started)
        if refusal is not None:
            raise ProcessSetupError(refusal)
    if count > 1 and not env.launched:
        raise ProcessSetupError(
            f"{selection.asked_devices} on {accelerator!r} needs one process per "
            f"device, started by a launcher; this process was started alone. "
            f"Run:\n    {launch_command_line}"
        )
    if env.launched and env.local_world_size != count:
        fix = "launch with --devices matching the script"
        fix = f"srun --ntasks-per-node={count}" if env.launcher.startswith("srun") else fix
        raise ProcessSetupError(
            f"{env.launcher} started {env.local_world_size} process(es) on this machine but the "
            f"Trainer has {count} {accelerator} device(s) ({', '.join(str(d) for d in devices)}). "
            f'Leave devices="auto" in the script to take one device per process, or {fix}'
        )
    return devices[env.local_rank if env.launched else 0]


#: The launch lines a process started alone was told about (each once per process).
_told_alone: set[str] = set()


def alone_on_first_device(selection: Selection, hint: str) -> Selection:
    """Return what ``devices="auto"`` takes in a process started alone.

    Such as ``python train.py``, no launcher: the first device of several, as Lightning's and
    Accelerate's single-process defaults do, with one warning per process saying how to use them all
    (``hint``: the ``accelctl launch`` line). One process cannot use several devices, and "auto"
    never selects a set-up that cannot run."""
    if len(selection.devices) <= 1:
        return selection
    first = selection.first_device()
    if hint not in _told_alone:
        _told_alone.add(hint)
        warn_user(
            f"{len(selection.devices)} {selection.shown_name} devices are visible, but this "
            f'process was started alone, so devices="auto" trains on {first.devices[0]} only. '
            f"To train on all of them, one process each: {hint}"
        )
    return first


def launch_hint(selection: Selection) -> str:
    """Return the command that runs this script with one process per device.

    The devices are ``selection``'s; the accelerator is named as the user knows it
    (``--accelerator openreg``)."""
    name = selection.shown_name if selection.accelerator.entry_point is not None else None
    spec = selection.given_devices
    argv = script_argv()
    if argv is None:
        accelerator = repr(name) if name else "<your accelerator>"
        return (
            f"accelctl.launch(<your training function>, accelerator={accelerator}, "
            f"devices={spec!r}) from Python, or `accelctl launch` with a script"
        )
    return launch_command_line(name, spec, argv)


def join_process_group(
    backend: str,
    env: ProcessEnvironment,
    device: torch.device,
    timeout: datetime.timedelta,
) -> int | None:
    """Join the default ``torch.distributed`` process group of this run.

    Rendezvous through the launcher's ``MASTER_ADDR`` / ``MASTER_PORT`` (under torchrun), else at
    the address the scheduler's variables gave (:class:`ProcessEnvironment`). A process started
    alone (FSDP2 in one process) makes a group of one on an in-memory store: no port is opened.

    :param timeout: how long each collective may wait for the other processes.

    :returns: the group's number when this call created it (and the caller destroys it), the
        same in every process of the run (0 for a group of one); None when one already existed
        with the same size (a user's own set-up, or an earlier ``fit``).
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
        return None
    if not env.launched:
        store = dist.HashStore()  # type: ignore[attr-defined]  # not in torch's stubs
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
        return 0
    init_method = "env://"  # torchrun's: MASTER_ADDR / MASTER_PORT (or its agent's store)
    if env.launcher != "torchrun" and env.master_addr is not None:
        host = f"[{env.master_addr}]" if ":" in env.master_addr else env.master_addr
        init_method = f"tcp://{host}:{env.master_port}"
    # One store per process, and keys of its own in it per group: torch names every new default
    # group alike, so a second fit would read the first group's addresses.
    from torch._C._distributed_c10d import PrefixStore
    from torch.distributed.rendezvous import rendezvous

    if init_method not in _stores:
        _stores[init_method] = next(
            rendezvous(init_method, env.rank, env.world_size, timeout=timeout)
        )[0]
    store = _stores[init_method]
    group = _group_number(store, env, init_method, timeout)
    try:
        dist.init_process_group(
            backend=backend,
            store=PrefixStore(f"accelctl.fit{group}", store),
            rank=env.rank,
            world_size=env.world_size,
            timeout=timeout,
            # Bound to this process's device, collectives without tensors (barrier) know where
            # to run: torch otherwise warns in every rank and guesses the current device.
            device_id=_bindable(device),
        )
    except BaseException:  # a Ctrl-C while ranks join too: torch's group count is put back
        _forget_failed_group(timeout)
        raise
    return group


#: The store key where rank 0 counts the groups it made on a store (one key per group made
#: marks it published: ``accelctl.groups/N``).
_GROUPS_KEY = "accelctl.groups"


def _group_number(
    store: Any, env: ProcessEnvironment, init_method: str, timeout: datetime.timedelta
) -> int:
    """Return the number of the group this fit makes, the same in every rank.

    Rank 0 counts its groups in the store, and every other rank joins rank 0's newest one after the
    last it joined.

    A count of each process's own would diverge for good once a rank failed a fit the others
    never reached (its join timed out while rank 0 hung, say): every later fit would wait on
    keys no other rank writes (docs/design/process-groups.md).

    :raises CollectiveTimeoutError: when rank 0 made no new group within ``timeout``.
    """
    if env.rank == 0:
        number = int(store.add(_GROUPS_KEY, 1))
        store.set(f"{_GROUPS_KEY}/{number}", str(number))
    else:
        after = _joined.get(init_method, 0)
        try:
            store.wait([f"{_GROUPS_KEY}/{after + 1}"], timeout)
        except RuntimeError as exc:
            if "timeout" not in str(exc).lower() and "timed out" not in str(exc).lower():
                raise
            raise CollectiveTimeoutError(
                f"rank {env.rank} of {env.world_size} waited {timeout.total_seconds():g} s for "
                f"rank 0 to start this fit's process group and gave up: rank 0 hung or died "
                f"before it, calls fit fewer times than this rank, or works longer than that "
                f"alone (raise {ENV_COLLECTIVE_TIMEOUT}, in seconds)"
            ) from None
        number = int(store.add(_GROUPS_KEY, 0))  # rank 0's newest: one it may have retried
    _joined[init_method] = number
    return number


def _forget_failed_group(timeout: datetime.timedelta) -> None:
    """Undo what a failed ``init_process_group`` left, so that the next group is named alike.

    torch numbers the default groups it names and counts from zero again only when one is destroyed,
    so a rank whose group timed out would name its next group unlike the others' and never meet
    them. A group of one, made and destroyed at once on an in-memory store, resets the count."""
    import torch.distributed as dist

    if dist.is_initialized() or not dist.is_gloo_available():
        return
    try:
        store = dist.HashStore()  # type: ignore[attr-defined]  # not in torch's stubs
        dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timeout)
        dist.destroy_process_group()
    except Exception as exc:  # the error being raised says more than this one
        warn_user(f"could not reset torch.distributed after a failed process group: {exc}")


def _bindable(device: torch.device) -> torch.device | None:
    """Return ``device`` where ``init_process_group(device_id=...)`` takes it, else None.

    An indexed device of the accelerator torch was built for or has loaded (``cuda:1``,
    ``openreg:0``); None for the CPU (its collectives need no device) and for a device of another
    type, which torch refuses."""
    import torch

    if device.type == "cpu" or device.index is None:
        return None
    current = torch.accelerator.current_accelerator()
    return device if current is not None and current.type == device.type else None


#: The rendezvous store of each address, and the last group (rank 0's count) joined on each.
_stores: dict[str, Any] = {}
_joined: dict[str, int] = {}


def script_argv() -> list[str] | None:
    """Return the command line of a script run with ``python script.py args``, or None.

    None in a notebook, a REPL or ``python -c``, where there is no script to hand to ``accelctl
    launch``."""
    return list(sys.argv) if sys.argv and sys.argv[0].endswith(".py") else None

"""``accelctl launch SCRIPT``: one process per device of the selection, through torchrun.

torchrun is called in this process (docs/training.md, "Choices accelctl launch makes")."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .._choice.selection import Selection, resolve
from .._contract import settings
from .._contract.device_specs import devices_spec
from .._contract.errors import AccelctlError, LaunchError, PluginWarning, warn_user
from .._contract.kernel_error import DEBUG_SWITCH
from .deepspeed_config import check_deepspeed_config
from .failures import ERROR_FILE_VARIABLE, LaunchFailedError, RankFailure
from .handoff import (
    cores_per_process,
    launch_command_line,
    patched_environ,
    selection_environment,
)
from .options import Nodes, check_processes, plan_nodes, torchrun_variables
from .supervision import (
    LaunchInterruptedError,
    _handling,
    forwarding_user_signals,
    launcher_environment,
    wait_forwarding_signals,
)
from .torch_logs import quiet_torch_logs

#: What every child runs: ``python -m accelctl.launcher SCRIPT ARGS`` (see :mod:`.child`).
CHILD_MODULE = "accelctl.launcher"


def launch_script(
    script: str,
    script_args: Sequence[str] = (),
    *,
    accelerator: Any = "auto",
    devices: Any = "auto",
    nnodes: int | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    quiet: bool = True,
    max_restarts: int = 0,
    typed_devices: str | None = None,
) -> Selection:
    """Run ``script`` on one process per device of the selection; what ``accelctl launch`` does.

    One device on one machine, without restarts: ``python script args`` in a child process;
    else torchrun starts ``len(devices)`` processes on each of ``nnodes`` machines (node 0 hosts
    the rendezvous). Machine options left out are read from the scheduler (:func:`.plan_nodes`;
    a line on stderr says what was taken from where).

    :param quiet: hide torch's elastic-agent log lines (the failure is reported by the error).
    :param max_restarts: restart the whole group up to this many times when a process fails
        (the Trainer resumes from its last checkpoint by itself).
    :param typed_devices: the devices as the user typed them (``accelctl launch --devices 2``),
        for the command lines an error suggests, where ``devices`` is their exact form; default:
        ``devices`` as given.
    :returns: the selection the children ran on, when every process exited with status 0.
    :raises LaunchFailedError: when a child failed, naming it and its error.
    :raises LaunchInterruptedError: on SIGINT (Ctrl-C) or SIGTERM, once the children stopped.
    :raises LaunchError: for impossible multi-machine options (a ``NodeOptionError``).
    :raises ProcessSetupError: for a DeepSpeed config on the script's command line that cannot
        run on the selection's device (:func:`.check_deepspeed_config`).
    """
    nodes = plan_nodes(nnodes, node_rank, master_addr, master_port)
    if max_restarts < 0:
        raise LaunchError(f"max_restarts={max_restarts}: give a number of restarts >= 0")
    selection = resolve(accelerator, devices)
    nproc = len(selection.devices)
    check_processes(selection, nproc * nodes.nnodes)
    check_deepspeed_config(script, script_args, selection)
    if nodes.note:
        print(f"accelctl launch: {nodes.note}", file=sys.stderr, flush=True)
    env = {
        **selection_environment(selection),
        **launcher_environment(),
        **_fallback_switch(selection),
    }
    command = launch_command_line(
        selection.shown_name, devices_spec(selection.parsed), [script, *script_args]
    )
    phase = Phase()
    with (
        interrupted_anywhere(phase),
        tempfile.TemporaryDirectory(prefix="accelctl-note-", ignore_cleanup_errors=True) as notes,
    ):
        # Rank 0's Trainer notes each checkpoint here, for the report of an interrupted launch.
        note = os.path.join(notes, "checkpoint.json")
        env[settings.LAUNCH_NOTE] = note
        try:
            phase.processes = LaunchInterruptedError.STOPPED
            _launch(script, script_args, selection, nodes, env, quiet, max_restarts, phase)
        except LaunchInterruptedError as exc:
            clause = resume_clause(note, command)
            raise LaunchInterruptedError(exc.signum, clause, phase.processes) from None
        except LaunchFailedError as exc:
            line = _one_line(exc, script, script_args, selection, typed_devices)
            if line is None:
                raise
            raise LaunchFailedError(line, failure=exc.failure) from None
    return selection


def _one_line(
    exc: LaunchFailedError,
    script: str,
    script_args: Sequence[str],
    selection: Selection,
    typed_devices: str | None,
) -> str | None:
    """Return the launch's one line for the accelctl error a process raised, or None.

    The process printed no traceback. A missing kernel's ways out as ``accelctl launch`` lines (the
    devices as the user typed them); None for any other failure."""
    failure = exc.failure
    if failure is None:
        return None
    missing = failure.missing_kernel_error()
    if missing is None:
        if failure.accelctl_error is None:
            return None
        return f"{failure.accelctl_error} ({DEBUG_SWITCH} shows the traceback)"
    nproc = len(selection.devices)
    on_cpu = shlex.join(
        ["accelctl", "launch", "--cpu", "--devices", str(nproc), script, *script_args]
    )
    as_launched = launch_command_line(
        selection.shown_name, typed_devices or selection.given_devices, [script, *script_args]
    )
    return missing.for_launch(on_cpu, as_launched)


def _fallback_switch(selection: Selection) -> dict[str, str]:
    """Return torch's own CPU-fallback switch for the device, where its plugin names one.

    With ``ACCELCTL_CPU_FALLBACK=1``; such as MPS's ``PYTORCH_ENABLE_MPS_FALLBACK``. torch
    reads it when a child imports it."""
    if not settings.cpu_fallback():
        return {}
    try:
        variable = selection.accelerator.kernel_gaps().fallback_variable
    except AccelctlError as exc:  # a broken hook: the children say what they can
        warn_user(f"no fallback switch from the plugin: {exc}", PluginWarning)
        return {}
    return {variable: "1"} if variable else {}


class Phase:
    """Where a launch's processes are, for the message of a signal.

    See :class:`LaunchInterruptedError`. Not started until the launch begins them."""

    def __init__(self) -> None:
        self.processes = LaunchInterruptedError.NOT_STARTED


@contextlib.contextmanager
def interrupted_anywhere(phase: Phase | None = None) -> Iterator[None]:
    """End the launcher on SIGINT and SIGTERM with :class:`LaunchInterruptedError`, while in force.

    Wherever the launcher is (the CLI's one line and ``128 + signal``): before its processes start,
    while torchrun shuts down after they ended, while it cleans up (the note of the last checkpoint
    is read while it is there); the message says where its processes were (``phase``; without one:
    not started). Where a handler of the processes' (torchrun's, the single child's wait) is in
    force, that one stops them first."""
    where = phase or Phase()

    def interrupted(signum: int, frame: object) -> NoReturn:
        raise LaunchInterruptedError(signum, processes=where.processes)

    with _handling((signal.SIGINT, signal.SIGTERM), interrupted):
        yield


@contextlib.contextmanager
def torchruns_handlers_undone() -> Iterator[None]:
    """Undo the signal handlers torchrun's workers set, when it returns.

    They never restore them: theirs raise ``SignalException`` for good."""
    signums = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]
    previous = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                with contextlib.suppress(ValueError):  # not the main thread: nothing was set
                    signal.signal(signum, handler)


def resume_clause(note: str, command: str) -> str | None:
    """Say where the last checkpoint is and how to resume from it, or None.

    ``the last checkpoint is X (epoch 2, step 40); to resume from it:
    ACCELCTL_CKPT_PATH=X accelctl launch ...``, from the note rank 0's Trainer left (None when it
    left none: the script wrote no checkpoint, or is no accelctl Trainer's)."""
    import json

    try:
        with open(note) as file:
            written = json.load(file)
        path, epoch, step = str(written["checkpoint"]), int(written["epoch"]), int(written["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    variable = f"{settings.CKPT_PATH}={shlex.quote(path)}"
    return (
        f"the last checkpoint is {path} (epoch {epoch + 1}, step {step}); to resume from it: "
        f"{variable} {command}"
    )


def _launch(
    script: str,
    script_args: Sequence[str],
    selection: Selection,
    nodes: Nodes,
    env: dict[str, str],
    quiet: bool,
    max_restarts: int,
    phase: Phase | None = None,
) -> None:
    """Start the processes of :func:`launch_script` and wait for them.

    ``phase`` says when they have ended."""
    nproc = len(selection.devices)
    if nproc == 1 and nodes.nnodes == 1 and not max_restarts and not nodes.from_torchrun_env:
        _run_single(script, script_args, env)
        if phase is not None:
            phase.processes = LaunchInterruptedError.ENDED
        return

    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    # torchrun's own parser and runner: every option it has keeps its meaning and defaults.
    parse_args: Callable[[list[str]], Any] = torchrun.parse_args
    run: Callable[[Any], None] = torchrun.run

    argv = torchrun_argv(nproc, nodes, max_restarts=max_restarts)
    argv += ["--module", CHILD_MODULE, script, *script_args]
    if max_restarts and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in os.environ:
        # The store torchrun shares with its workers outlives a restart, and restarted workers
        # would read stale gloo addresses from it: a store per attempt instead.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if not os.environ.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(cores_per_process(nproc))
    with tempfile.TemporaryDirectory(prefix="accelctl-launch-", ignore_cleanup_errors=True) as logs:
        if not torchrun_variables():
            # torchrun's folder of the ranks' error records, removed once they are read: left
            # to torchrun, a torchelastic_* folder stays in the temporary folder at each launch.
            # Where torchrun's own PET_* variables are set, its configuration is the user's, and
            # its log folder too (PET_LOG_DIR, or the ranks' output under PET_REDIRECTS/PET_TEE).
            argv[:0] = ["--log-dir", logs]
        try:
            # torchrun's children inherit this process's environment.
            with (
                patched_environ(env),
                quiet_torch_logs(quiet),
                forwarding_user_signals(),
                torchruns_handlers_undone(),
            ):
                run(parse_args(argv))
            if phase is not None:
                phase.processes = LaunchInterruptedError.ENDED
        except ChildFailedError as exc:
            failure = RankFailure.from_child_failed(exc, nproc * nodes.nnodes)
            restarts = f" (after {max_restarts} restart(s) of the group)" if max_restarts else ""
            raise LaunchFailedError(
                failure.describe() + "; the other processes were stopped" + restarts,
                failure=failure,
            ) from None
        except SignalException as exc:  # torchrun passed the signal on to its workers, waited
            raise LaunchInterruptedError(int(exc.sigval)) from None
        except KeyboardInterrupt:  # before torchrun's handlers were installed (rendezvous)
            raise LaunchInterruptedError(signal.SIGINT) from None


def torchrun_argv(nproc: int, nodes: Nodes, *, max_restarts: int) -> list[str]:
    """Return torchrun's options for ``nproc`` processes on each machine of ``nodes``.

    They go before the program. Under its ``PET_*`` variables only those it does not read
    itself."""
    argv = ["--nproc-per-node", str(nproc)]
    if nodes.from_torchrun_env:
        return argv + (["--max-restarts", str(max_restarts)] if max_restarts else [])
    argv += ["--nnodes", str(nodes.nnodes), "--max-restarts", str(max_restarts)]
    if nodes.nnodes == 1 and nodes.master_addr is None and nodes.master_port is None:
        argv.append("--standalone")  # a free port on localhost: two launches never collide
    else:
        argv += ["--node-rank", str(nodes.node_rank)]
        argv += ["--master-addr", nodes.master_addr or "127.0.0.1"]
        argv += ["--master-port", str(nodes.master_port or 29500)]
    if nodes.run_id:
        argv += ["--rdzv-id", nodes.run_id]
    return argv


def _run_single(script: str, script_args: Sequence[str], child_env: Mapping[str, str]) -> None:
    """``python script args`` with the selection in its environment; raises on failure."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="accelctl-launch-") as folder:
        error_file = os.path.join(folder, "error.json")
        env = {**os.environ, **child_env, ERROR_FILE_VARIABLE: error_file}
        command = [sys.executable, "-m", CHILD_MODULE, script, *script_args]
        process = subprocess.Popen(command, env=env)
        with forwarding_user_signals():
            returncode = wait_forwarding_signals(process)
        if returncode == 0:
            return
        from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

        record = ProcessFailure(
            local_rank=0, pid=process.pid, exitcode=returncode, error_file=error_file
        )
        failure = RankFailure.from_process_failure(0, 1, record)
        raise LaunchFailedError(failure.describe(os.path.basename(script)), failure=failure)

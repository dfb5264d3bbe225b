"""Starting one process per device: ``accelctl launch`` for scripts, :func:`launch` for functions.

Both resolve the selection once, in the launching process, and hand it to every child through
``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES``, so that a ``Trainer()`` with default arguments
in a child runs on what the launcher chose; each child takes ``devices[LOCAL_RANK]``.

Processes are started by PyTorch's own launcher, never by hand: ``torch.distributed.run``
(torchrun) for scripts, called in this process through its argument parser and ``run`` (this
process has imported torch already to resolve the devices, so a second interpreter would only add
a start-up; and in-process we receive torchrun's ``ChildFailedError`` and report the failing child
in a line instead of torchrun's page-long report), and torch's elastic launch API
(``elastic_launch`` / ``LaunchConfig``) for functions.

Visible-device variables (``CUDA_VISIBLE_DEVICES`` and the like) are left as they are: children
receive explicit device indices instead. Narrowing the variable per child would renumber the
devices (``cuda:0`` in rank 1 would be physical device 1), so messages, ``device_stats`` (NVML
counts devices regardless of the variable) and ``nvidia-smi`` would disagree about which device
is which, and the core would need to know each vendor's variable. A variable the user set before
launching is inherited by every child, and the indices are relative to it in the launcher and in
the children alike.

Run as ``python -m accelctl.launcher SCRIPT [ARGS ...]`` (what ``accelctl launch`` starts), this
module runs SCRIPT as ``__main__`` and records an exception it raises in torchrun's error file,
so that the launcher can name the failing process's own error. Every child dies with its
launcher, and a signal to the launcher stops them all (:mod:`accelctl.supervision`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._project import ENV_ACCELERATOR, ENV_DEVICES
from .errors import AccelctlError, LaunchError
from .selection import Selection, resolve
from .supervision import (
    LaunchInterruptedError,
    die_with_launcher,
    launcher_environment,
    wait_forwarding_signals,
)

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

#: The variable torchrun's error handler writes a failing child's exception to.
_ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
#: What every child runs: this module, as ``python -m accelctl.launcher SCRIPT ARGS``.
_CHILD_MODULE = "accelctl.launcher"


class LaunchFailedError(AccelctlError):
    """A launched process failed; the others were stopped.

    ``str(error)`` is one line naming the process and its error; :attr:`traceback` holds that
    process's own traceback when it raised a Python exception.
    """

    def __init__(self, message: str = "", *, failure: RankFailure | None = None) -> None:
        super().__init__(message)
        #: The failed process, when known (None for an error raised from a message alone).
        self.failure = failure

    @property
    def exit_code(self) -> int:
        """The exit status a launcher reports: the child's own, ``128 + N`` for signal ``N``
        (1 when the failure is not known)."""
        return self.failure.exit_code if self.failure is not None else 1

    @property
    def traceback(self) -> str | None:
        """The failing process's traceback, when it raised a Python exception."""
        return self.failure.traceback if self.failure is not None else None


@dataclass(frozen=True)
class RankFailure:
    """The first process of a launch that failed (the root cause; the others were stopped)."""

    rank: int
    world_size: int
    #: The child's exit status: positive, or ``-N`` when killed by signal ``N``.
    exitcode: int
    #: ``"ValueError: boom"`` when the child raised, else a sentence about the exit.
    error: str
    traceback: str | None = None

    @property
    def exit_code(self) -> int:
        """A shell-style status: the child's own, ``128 + N`` for a signal, never 0."""
        if self.exitcode < 0:
            return 128 - self.exitcode
        return self.exitcode or 1

    def describe(self, what: str | None = None) -> str:
        """One line: ``"rank 1 of 2 failed (exit code 1): ValueError: boom"``."""
        who = what or f"rank {self.rank} of {self.world_size}"
        return f"{who} failed ({self._status()}): {self.error}"

    def _status(self) -> str:
        if self.exitcode < 0:
            import signal

            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = f"signal {-self.exitcode}"
            return f"killed by {name}"
        return f"exit code {self.exitcode}"

    @classmethod
    def from_process_failure(
        cls, rank: int, world_size: int, failure: ProcessFailure
    ) -> RankFailure:
        """Read torch's record of a failed child (its error file, when it wrote one)."""
        message = failure.message
        traceback = None
        if isinstance(message, Mapping):  # written by torch's error handler: the exception
            traceback = message.get("extraInfo", {}).get("py_callstack") or None
            error = str(message.get("message", "")).strip()
        else:
            error = ""
        if not error:
            error = (
                "no Python exception was recorded; see its output above"
                if failure.exitcode >= 0
                else "stopped by a signal (out of memory? killed by the system?)"
            )
        return cls(rank, world_size, failure.exitcode, error, traceback)

    @classmethod
    def from_child_failed(cls, exc: ChildFailedError, world_size: int) -> RankFailure:
        """The root cause of torchrun's ``ChildFailedError``: the first process that failed.

        torch's agent polls its processes (every 0.1 s); at the first poll that finds a failure
        it records the failed ones, SIGTERMs the others and records them too, in that order. So,
        in order of blame:

        1. a process that failed by itself beats one torchrun stopped (SIGTERM, recorded after
           the first) even when the stopped one recorded an exception: a rank killed by SIGKILL
           or ended by ``sys.exit`` writes no error file, its survivor does (gloo's "Connection
           closed by peer"), and is then stopped;
        2. an error that only says a peer went away (a lost connection) comes after any other;
        3. then time: the error file's modification time (nanoseconds: the crashing rank writes
           its file before its exit closes the connections), else torch's whole-second stamp.
        """
        import signal

        detected = list(exc.failures)  # in the order torch's agent recorded them

        def blame(item: tuple[int, ProcessFailure]) -> tuple[bool, bool, int, int]:
            rank, failure = item
            stopped = failure.exitcode == -signal.SIGTERM and detected.index(rank) > 0
            lost_peer = _says_peer_lost(failure)
            try:
                when = os.stat(failure.error_file).st_mtime_ns
            except OSError:  # no error file (a signal, sys.exit): torch's own timestamp
                when = failure.timestamp * 1_000_000_000
            return stopped, lost_peer, when, rank

        rank, failure = min(exc.failures.items(), key=blame)
        return cls.from_process_failure(rank, world_size, failure)


#: What the communication libraries say when a process's peer died (gloo, NCCL, the store).
_PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote worker crash",
    "remote process exited",
)


def _says_peer_lost(failure: ProcessFailure) -> bool:
    message = failure.message
    text = str(message.get("message", "")) if isinstance(message, Mapping) else str(message)
    return any(marker in text.lower() for marker in _PEER_LOST)


# -- the selection, handed to children -------------------------------------------------------


def devices_spec(parsed: int | Sequence[int]) -> str:
    """A devices spec that parses back to ``parsed``: ``"2"`` for a count, ``"0,2"`` for indices,
    ``"1,"`` for a single index (``"1"`` would mean "the first one")."""
    if isinstance(parsed, int):
        return str(parsed)
    indices = [str(index) for index in parsed]
    return ",".join(indices) + ("," if len(indices) == 1 else "")


def selection_environment(selection: Selection) -> dict[str, str]:
    """``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES`` for the children of a launch.

    An accelerator passed as an instance (no entry point) cannot be named in a variable: its
    children get the devices only, and the script passes the instance itself.
    """
    env = {ENV_DEVICES: devices_spec(selection.parsed)}
    if selection.accelerator.entry_point is not None:
        env[ENV_ACCELERATOR] = selection.accelerator.name
    return env


def launch_command(accelerator: str | None, devices: str, argv: Sequence[str]) -> str:
    """The ``accelctl launch`` command line that runs ``argv`` (a script and its arguments)."""
    parts = ["accelctl", "launch"]
    if accelerator:
        parts += ["--accelerator", accelerator]
    parts += ["--devices", devices, *argv]
    return shlex.join(parts)


# -- scripts: accelctl launch ----------------------------------------------------------------


def launch_script(
    script: str,
    script_args: Sequence[str] = (),
    *,
    accelerator: Any = "auto",
    devices: Any = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    quiet: bool = True,
    max_restarts: int = 0,
) -> Selection:
    """Run ``script`` on one process per device of the selection; what ``accelctl launch`` does.

    One device on one machine, without restarts: ``python script args`` in a child process.
    Otherwise torchrun starts ``nproc_per_node = len(devices)`` processes on this machine,
    ``nnodes`` machines in all (rendezvous at ``master_addr:master_port``, node 0 hosts it).

    :param quiet: hide torch's elastic-agent log lines (the failure is reported by the error).
    :param max_restarts: when a process fails, restart the whole group up to this many times
        (torchrun's elastic restarts; the Trainer resumes from its last checkpoint by itself).
        With restarts, a single process runs under torchrun too.
    :returns: the selection the children ran on, when every process exited with status 0.
    :raises LaunchFailedError: when a child failed, naming it and its error.
    :raises LaunchInterruptedError: on SIGINT (Ctrl-C) or SIGTERM, once the children stopped.
    :raises LaunchError: for impossible multi-machine options.
    """
    _check_nodes(nnodes, node_rank, master_addr)
    if max_restarts < 0:
        raise LaunchError(f"max_restarts={max_restarts}: give a number of restarts >= 0")
    selection = resolve(accelerator, devices)
    nproc = len(selection.devices)
    _check_backend(selection, nproc * nnodes)
    child_env = {**selection_environment(selection), **launcher_environment()}
    if nproc == 1 and nnodes == 1 and not max_restarts:
        _run_single(script, script_args, child_env)
        return selection

    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    # torchrun's own parser and runner: every option it has keeps its meaning and defaults.
    parse_args: Callable[[list[str]], Any] = torchrun.parse_args
    run: Callable[[Any], None] = torchrun.run

    argv = ["--nproc-per-node", str(nproc), "--nnodes", str(nnodes)]
    argv += ["--max-restarts", str(max_restarts)]
    if nnodes == 1 and master_addr is None and master_port is None:
        argv.append("--standalone")  # a free port on localhost: two launches never collide
    else:
        argv += ["--node-rank", str(node_rank), "--master-addr", master_addr or "127.0.0.1"]
        argv += ["--master-port", str(master_port or 29500)]
    argv += ["--module", _CHILD_MODULE, script, *script_args]
    env = dict(child_env)
    if max_restarts and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in os.environ:
        # The rendezvous store torchrun shares with its workers outlives a restart, and the
        # restarted workers read the killed ones' stale gloo addresses from it (the group never
        # forms): a store per attempt, hosted by rank 0, is what a restart needs.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if not os.environ.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(_cores_per_process(nproc))
    try:
        # torchrun's children inherit this process's environment.
        with _patched_environ(env), _quiet_torch_logs(quiet):
            run(parse_args(argv))
    except ChildFailedError as exc:
        failure = RankFailure.from_child_failed(exc, nproc * nnodes)
        restarts = f" (after {max_restarts} restart(s) of the group)" if max_restarts else ""
        raise LaunchFailedError(
            failure.describe() + "; the other processes were stopped" + restarts,
            failure=failure,
        ) from None
    except SignalException as exc:  # torchrun passed the signal on to its workers and waited
        raise LaunchInterruptedError(int(exc.sigval)) from None
    except KeyboardInterrupt:  # before torchrun's handlers were installed (rendezvous)
        raise LaunchInterruptedError(signal.SIGINT) from None
    return selection


def _run_single(script: str, script_args: Sequence[str], child_env: Mapping[str, str]) -> None:
    """``python script args`` with the selection in its environment; raises on failure."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="accelctl-launch-") as folder:
        error_file = os.path.join(folder, "error.json")
        env = {**os.environ, **child_env, _ERROR_FILE_VARIABLE: error_file}
        command = [sys.executable, "-m", _CHILD_MODULE, script, *script_args]
        process = subprocess.Popen(command, env=env)
        exitcode = wait_forwarding_signals(process)
        if exitcode == 0:
            return
        from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

        record = ProcessFailure(
            local_rank=0, pid=process.pid, exitcode=exitcode, error_file=error_file
        )
        failure = RankFailure.from_process_failure(0, 1, record)
        raise LaunchFailedError(failure.describe(os.path.basename(script)), failure=failure)


def _check_nodes(nnodes: int, node_rank: int, master_addr: str | None) -> None:
    if nnodes < 1:
        raise LaunchError(f"nnodes={nnodes}: the number of machines must be at least 1")
    if not 0 <= node_rank < nnodes:
        raise LaunchError(
            f"node_rank={node_rank} is not one of the {nnodes} machine(s): use 0 to {nnodes - 1} "
            f"(0 on the machine at --master-addr)"
        )
    if nnodes > 1 and not master_addr:
        raise LaunchError(
            f"nnodes={nnodes} needs --master-addr: the address of the machine started with "
            f"--node-rank 0, reachable from every machine (the same on all of them)"
        )


def _check_backend(selection: Selection, processes: int) -> None:
    if processes > 1 and selection.distributed_backend is None:
        name = selection.accelerator.name
        raise LaunchError(
            f"accelerator {name!r} runs in a single process only (its distributed_backend is "
            f"None), but {processes} processes were asked for; use --devices 1 on one machine, "
            f"or another accelerator (--cpu for several CPU processes)"
        )


def _cores_per_process(nproc: int) -> int:
    """An equal share of this machine's cores for each of ``nproc`` processes (at least one):
    torchrun's default of one thread per process starves CPU training on a large machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // nproc)


@contextlib.contextmanager
def _quiet_torch_logs(quiet: bool) -> Iterator[None]:
    """Raise torch.distributed's and torch.multiprocessing's loggers to CRITICAL for the duration
    (unless ``LOGLEVEL`` is set):
    their warnings (``Sending process ... closing signal``) and the failure's page-long record
    repeat what the launcher reports in one line."""
    if not quiet or os.environ.get("LOGLEVEL"):
        yield
        return
    import torch.distributed.run  # noqa: F401  (creates the loggers, each with its own level)

    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.startswith(("torch.distributed", "torch.multiprocessing"))
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# -- functions: accelctl.launch --------------------------------------------------------------


def launch(
    function: Callable[..., Any],
    *args: Any,
    accelerator: Any = "auto",
    devices: Any = "auto",
    start_method: str | None = None,
) -> list[Any]:
    """Run ``function(*args)`` in one process per device, as ``accelctl launch`` runs a script.

    For notebooks: a ``Trainer()`` inside ``function`` runs on what this call selected. One device:
    ``function`` runs in this process. Several: torch's elastic launch API starts the processes on
    this machine.

    .. code-block:: python

        def train(epochs):
            trainer = accelctl.Trainer(max_epochs=epochs)
            trainer.fit(Net(), loader)
            return trainer.metrics

        metrics = accelctl.launch(train, 3, accelerator="cpu", devices=2)  # one per rank

    :param start_method: ``"fork"`` (the default where available: a function defined in a
        notebook cannot be pickled for ``"spawn"``), ``"spawn"`` or ``"forkserver"``. A forked
        process computes on one CPU thread (GNU OpenMP hangs in a child forked from a process
        that used it); ``"spawn"`` gives each process an equal share of the cores, for a
        function importable from a module.
    :returns: each process's return value, in rank order.
    :raises LaunchFailedError: when a process raised; the message holds its traceback.
    """
    import multiprocessing

    selection = resolve(accelerator, devices)
    nproc = len(selection.devices)
    child_env = selection_environment(selection)
    _check_backend(selection, nproc)
    if nproc == 1:
        with _patched_environ(child_env):
            return [function(*args)]
    method = start_method or (
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    import torch

    cuda_initialized: Callable[[], bool] = torch.cuda.is_initialized
    if method == "fork" and cuda_initialized():
        raise LaunchError(
            "accelctl.launch cannot fork processes after CUDA was initialised in this process "
            "(a CUDA tensor or call earlier in the notebook): restart the kernel and call "
            "accelctl.launch before any CUDA work, or use start_method='spawn' with a function "
            "importable from a module"
        )
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # NVML-based device counting keeps a later fork usable (LaunchConfig counts CUDA devices).
    env = {**child_env, **launcher_environment(), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    if method != "fork" and not os.environ.get("OMP_NUM_THREADS"):
        # Fresh interpreters read it at start-up: an equal share of the cores each.
        env["OMP_NUM_THREADS"] = str(_cores_per_process(nproc))
    # A forked child cannot use the OpenMP threads of its parent (GNU OpenMP hangs): one thread.
    threads = 1 if method == "fork" else 0
    with _patched_environ(env), _quiet_torch_logs(True):
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nproc,
            run_id=str(uuid.uuid4()),
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            max_restarts=0,
            monitor_interval=0.1,
            start_method=method,
        )
        try:
            results = elastic_launch(config, _run_in_child)(threads, function, *args)
        except ChildFailedError as exc:
            failure = RankFailure.from_child_failed(exc, nproc)
            trace = f"\n\nrank {failure.rank}'s traceback:\n{failure.traceback}"
            raise LaunchFailedError(
                failure.describe() + (trace if failure.traceback else ""), failure=failure
            ) from None
    return [results[rank] for rank in sorted(results)]


def _run_in_child(threads: int, function: Callable[..., Any], *args: Any) -> Any:
    """Each launched process's entry point: ``function(*args)`` on ``threads`` CPU threads (0:
    as configured). A module-level function, so that ``spawn`` can pickle it."""
    die_with_launcher()
    if threads:
        import torch

        torch.set_num_threads(threads)
    return function(*args)


@contextlib.contextmanager
def _patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the duration, then restore what was there."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- the child side: python -m accelctl.launcher SCRIPT ARGS ---------------------------------


def run_script(argv: Sequence[str]) -> None:
    """Run ``argv[0]`` as ``__main__`` with ``argv[1:]`` as its arguments, as ``python script``
    does (same ``sys.argv``, ``sys.path[0]`` the script's folder), recording an exception it raises
    in the file named by ``TORCHELASTIC_ERROR_FILE`` for the launcher's report."""
    import runpy

    from torch.distributed.elastic.multiprocessing.errors import record

    if not argv:
        raise SystemExit("usage: python -m accelctl.launcher SCRIPT [ARGS ...]")
    die_with_launcher()  # before the script: a SIGKILLed launcher takes its children along
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    record(runpy.run_path)(script, run_name="__main__")


if __name__ == "__main__":
    run_script(sys.argv[1:])

"""A real SLURM cluster on this machine: ``munged``, ``slurmctld`` and two ``slurmd`` "nodes".

Debian's ``slurm-wlm`` runs several ``slurmd`` on one host (``slurmd -N NAME``), each with a port
of its own, so two nodes share the loopback interface. Their names, ``accelctl-node1`` and
``accelctl-node2``, resolve to 127.0.0.1 through ``/etc/hosts`` (``scripts/setup-machine`` adds
them), as node names resolve on a real cluster: the daemons talk over ``NodeAddr=127.0.0.1``, but a
job on two nodes meets at its first node's name (``SLURM_STEP_NODELIST``), which must resolve.
Everything the daemons write (the munge key and socket, ``slurm.conf``, state, spool, logs, pid
files) is under one folder; the daemons are started by :func:`start_cluster` and stopped by
:meth:`SlurmCluster.stop`, by pid, which removes the folder.

Used by ``tests/slurm/conftest.py`` (one cluster per test session) and ``bench/cluster.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = ("accelctl-node1", "accelctl-node2")
#: What the cluster needs on the machine (``scripts/setup-machine`` installs them with apt).
PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "scancel", "squeue")
#: Hang guards only (a loaded 2-core machine starts daemons and torch slowly); nothing is timed.
START_TIMEOUT_S = 60
JOB_TIMEOUT_S = 300

#: Variables of the caller's shell that would change what a job sees: a scheduler's, a
#: launcher's, accelctl's own. The cluster's jobs get none of them.
FOREIGN_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PET_", "OMPI_", "ACCELCTL_")
FOREIGN_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
FOREIGN_NAMES += ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def missing() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    absent = [program for program in PROGRAMS if shutil.which(program) is None]
    if absent:
        return (
            f"SLURM is not installed here ({', '.join(absent)} missing): "
            "sudo bash scripts/setup-machine installs it (the slurm test session runs it as root)"
        )
    if os.geteuid() != 0:
        return "slurmd runs as root; these tests are not root"
    for node in NODES:
        try:
            socket.gethostbyname(node)
        except OSError:
            return (
                f"the node name {node} does not resolve: sudo bash scripts/setup-machine adds "
                "it to /etc/hosts (the slurm test session runs it as root)"
            )
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SlurmCluster:
    """A running cluster: its folder, its ``slurm.conf``, its daemons' pids."""

    root: Path
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def environ(self, **extra: str) -> dict[str, str]:
        """Return the environment of a command run on this cluster.

        The caller's, without any scheduler's, launcher's or accelctl's variables, one CPU thread
        per process (the weights of runs with different process counts then agree bit for bit), and
        this cluster's ``SLURM_CONF``.
        """
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(FOREIGN_PREFIXES) and key not in FOREIGN_NAMES
        }
        env.update(SLURM_CONF=str(self.conf), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        bin_dir = str(Path(sys.executable).parent)  # accelctl's console script, in jobs too
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env.update(extra)
        return env

    def run(
        self, *command: str, timeout: float = JOB_TIMEOUT_S, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        """A SLURM command (``srun ...``, ``scontrol ...``) against this cluster; output kept."""
        return subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            env=self.environ(**extra),
            timeout=timeout,
        )

    def sbatch(self, *options: str, **extra: str) -> int:
        """Submit a batch job; its id."""
        done = self.run("sbatch", "--parsable", *options, **extra)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job_state(self, job: int) -> str:
        done = self.run("scontrol", "show", "job", "-o", str(job))
        for field_ in done.stdout.split():
            if field_.startswith("JobState="):
                return field_.split("=", 1)[1]
        return "UNKNOWN"

    def wait_for(self, job: int, *states: str, timeout: float = JOB_TIMEOUT_S) -> str:
        """Wait until ``job`` is in one of ``states`` (a hang guard bounds the wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state in states:
                return state
            time.sleep(0.2)
        raise AssertionError(f"job {job} still {self.job_state(job)} after {timeout} s")

    def nodes_idle(self) -> bool:
        done = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=30)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return done.returncode == 0 and all(states.get(node) == "idle" for node in NODES)

    def alive(self) -> bool:
        return bool(self.pids) and all(_alive(pid) for pid in self.pids.values())

    def stop(self) -> None:
        """Cancel what still runs, then stop the daemons by pid (SIGTERM, then SIGKILL)."""
        if self.pids.get("slurmctld") and _alive(self.pids["slurmctld"]):
            with contextlib.suppress(Exception):
                self.run("scancel", "--full", "--user", "root", timeout=30)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and self.run("squeue", "-h", timeout=30).stdout:
                    time.sleep(0.2)
        for name in ("slurmd-2", "slurmd-1", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                _terminate(pid)
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and a slurmd per node under ``root``; return once all are idle.

    Typically a second or two.
    """
    cluster = SlurmCluster(root)
    try:
        _start(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start(cluster: SlurmCluster) -> None:
    root = cluster.root
    for folder in ("munge", "key", "state", "log", *(f"spool-{node}" for node in NODES)):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o755)  # clients reach the socket
    (root / "key").chmod(0o700)
    key = root / "key" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "munge" / "socket"
    cluster.pids["munged"] = _daemon(
        root / "log" / "munged.out",
        "munged", "--foreground", f"--socket={socket_path}", f"--key-file={key}",
        f"--log-file={root / 'log' / 'munged.log'}", f"--pid-file={root / 'key' / 'pid'}",
        f"--seed-file={root / 'key' / 'seed'}",
    )  # fmt: skip
    _wait(lambda: socket_path.exists(), "munged's socket", cluster)
    cluster.conf.write_text(_slurm_conf(root, socket_path))
    conf = str(cluster.conf)
    cluster.pids["slurmctld"] = _daemon(
        root / "log" / "slurmctld.out", "slurmctld", "-D", "-f", conf
    )
    for number, node in enumerate(NODES, start=1):
        log = root / "log" / f"slurmd-{node}.out"
        cluster.pids[f"slurmd-{number}"] = _daemon(log, "slurmd", "-D", "-N", node, "-f", conf)
    _wait(cluster.nodes_idle, "two idle nodes", cluster)


def _slurm_conf(root: Path, munge_socket: Path) -> str:
    controller = socket.gethostname().split(".")[0]  # slurmctld checks it is this host
    lines = [
        "ClusterName=accelctl-test",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # A requeued job waits this long (+1 s) before it may start again: SLURM's least (its
        # default is 120 s).
        f"AuthInfo=socket={munge_socket},cred_expire=5",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool-%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        # Signals reach every process of a task (launchers' children too), as with cgroups.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin",
        # Pending jobs (a requeued one once it is eligible again) are looked at every second.
        "SchedulerParameters=sched_interval=1",
        "JobRequeue=1",
        "ReturnToService=2",
        "KillWait=2",
        "InactiveLimit=0",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        # Four CPUs a node whatever this machine has: a job of 3 tasks on a node fits.
        "SlurmdParameters=config_overrides",
        *(
            f"NodeName={node} NodeAddr=127.0.0.1 Port={free_port()} CPUs=4 State=UNKNOWN"
            for node in NODES
        ),
        "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
    ]
    return "\n".join(lines) + "\n"


#: The daemons this process started, so that their exit is seen (and reaped) by ``poll``.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _daemon(log: Path, *command: str) -> int:
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no terminal signal of the test run reaches it
            env={k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_PREFIXES)},
        )
    _CHILDREN[process.pid] = process
    return process.pid


def _wait(ready: object, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if callable(ready) and ready():
            return
        if not cluster.alive():
            break
        time.sleep(0.1)
    logs = "\n".join(
        f"--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}"
        for log in sorted((cluster.root / "log").glob("*"))
    )
    raise RuntimeError(f"the test cluster did not reach {what}:\n{logs}")


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _terminate(pid: int) -> None:
    for signum, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if not _alive(pid):
            return

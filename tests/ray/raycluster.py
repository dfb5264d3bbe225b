"""A real Ray cluster on this machine for the tests: a head and a second node.

Each a ``ray start --block`` process in a session of its own, on loopback, with free ports, no
dashboard and small resources, in a temporary folder. Stopped by the ids of the processes it
started, never by name (``ray stop`` would end every Ray process of the machine's user). Its
processes have a home of their own in that folder (:attr:`RayCluster.home`): Ray reads and writes
state there (``~/.ray/auth_token``, which a user's ``ray.init()`` leaves), and the user's must not
reach the test cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from slurm.cluster import free_port

#: A hang guard only: a node's daemons start in seconds, minutes on a loaded 2-core machine.
START_TIMEOUT_S = 300
#: What ``ray start --block`` prints once its node runs.
STARTED = "will now block forever"

#: The ports Ray would otherwise take from fixed defaults (two nodes on one machine, and other
#: test sessions, must not meet there).
_PORT_OPTIONS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
)


@dataclass
class RayCluster:
    """The running nodes, and where their logs are."""

    root: Path
    address: str = ""
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def home(self) -> Path:
        """``HOME`` for the cluster's processes (its nodes, and the driver the tests run)."""
        return self.root / "home"

    def start_node(self, name: str, env: Mapping[str, str], *options: str) -> None:
        """``ray start OPTIONS --block`` as node ``name``; returns once it runs."""
        # Ray's own command, wherever its package is (its script would be in its folder's bin).
        argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
                "--node-ip-address=127.0.0.1", "--disable-usage-stats",
                "--object-store-memory=100000000", *options]  # fmt: skip
        argv += [f"{option}={free_port()}" for option in _PORT_OPTIONS]
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            node = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**env, "HOME": str(self.home)},
                start_new_session=True,
            )
        self.nodes.append(node)
        deadline = time.monotonic() + START_TIMEOUT_S
        while STARTED not in log.read_text(errors="replace"):
            if node.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray node {name} did not start:\n{log.read_text()[-4000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM each node's ``ray start``, then SIGKILL whatever of theirs is left, by id.

        ``ray start`` stops its daemons on SIGTERM; what is killed are the processes it started.
        """
        started = set()
        for node in self.nodes:
            with contextlib.suppress(psutil.NoSuchProcess):
                started |= {p.pid for p in psutil.Process(node.pid).children(recursive=True)}
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
        for node in self.nodes:
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        for pid in started | {node.pid for node in self.nodes}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)  # daemons that left the tree, same group
            node.wait()


@contextlib.contextmanager
def ray_cluster(
    head_env: Mapping[str, str],
    node_env: Mapping[str, str],
    node_resources: Mapping[str, float],
    logs: Path,
) -> Iterator[RayCluster]:
    """Start a head and a second node; stop and remove them on the way out.

    The head has one CPU and the resource ``no_openreg``; The second node has two CPUs and
    ``node_resources``; they are removed whatever happened; the nodes' own output is left in
    ``logs``.
    """
    # Not under pytest's folders: Ray's sockets live in its folder, and a socket's path is at
    # most 107 bytes.
    cluster = RayCluster(Path(tempfile.mkdtemp(prefix="accelctl-ray-")))
    cluster.home.mkdir()
    port = free_port()
    try:
        cluster.start_node(
            "head", head_env, "--head", f"--port={port}", "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={cluster.root / 'tmp'}", "--resources=" + json.dumps({"no_openreg": 1}),
        )  # fmt: skip
        cluster.address = f"127.0.0.1:{port}"
        cluster.start_node(
            "node2", node_env, f"--address={cluster.address}", "--num-cpus=2",
            "--resources=" + json.dumps(dict(node_resources)),
        )  # fmt: skip
        yield cluster
    finally:
        cluster.stop()
        for log in cluster.root.glob("*.log"):
            shutil.copy(log, logs / log.name)
        shutil.rmtree(cluster.root, ignore_errors=True)

"""One real SLURM cluster per test session (``cluster.py``), shared by pytest-xdist's workers.

The first worker that needs the cluster starts it, under a file lock in the folder all workers of
a run share, and records it there; the others use it. Each worker registers while it may use the
cluster; the worker that started it stops it (by pid) at its own end, once no living worker is
registered. A worker that comes to need it after that starts a fresh one and owns it. Under CI a
machine without SLURM fails these tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # cluster.py, also used by bench/cluster.py

from cluster import SlurmCluster, missing, start_cluster


def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _locked_state(folder: Path) -> Iterator[dict[str, Any]]:
    """The shared record of the cluster, read and written under an exclusive lock."""
    with (folder / "slurm-cluster.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = folder / "slurm-cluster.json"
        state = json.loads(path.read_text()) if path.exists() else {}
        yield state
        state["users"] = [pid for pid in state.get("users", []) if _running(pid)]
        if state.get("root"):
            path.write_text(json.dumps(state))
        else:
            path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running cluster of two idle nodes (``accelctl-node[1-2]``)."""
    reason = missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; under CI the SLURM tests must run", pytrace=False)
        pytest.skip(reason)
    folder, me = _shared_folder(tmp_path_factory), os.getpid()
    with _locked_state(folder) as state:
        cluster = SlurmCluster(Path(state["root"]), state["pids"]) if state.get("root") else None
        if cluster is None or not cluster.alive():
            if cluster is not None:
                cluster.stop()  # a cluster whose daemons died: clear it away
            # Not under pytest's folders (mode 700): munged wants its socket's folders open to all.
            root = Path(tempfile.mkdtemp(prefix="accelctl-slurm-"))
            root.chmod(0o755)
            cluster = start_cluster(root)
            state.update(root=str(root), pids=cluster.pids, owner=me, users=[])
        state["users"].append(me)
    try:
        yield cluster
    finally:
        with _locked_state(folder) as state:
            state["users"] = [pid for pid in state.get("users", []) if pid != me]
        if state.get("owner") == me:  # the starter stops it, once nobody else uses it
            while True:
                with _locked_state(folder) as state:
                    if not state.get("users"):
                        cluster.stop()
                        state.clear()
                        break
                time.sleep(0.5)

"""The Ray bridge's tests: in-process ones, and ``ray``-marked ones on a real local cluster.

The in-process ones need no cluster; the ``ray``-marked ones read what one driver (``ray_run.py``)
left after its runs on a real local Ray cluster (``raycluster.py``), started, used and stopped once
per test session by whichever pytest-xdist worker asks first.

The cluster: a head whose workers cannot use the ``privateuse1`` plugin (``ACCELCTL_DISABLE``,
as on a node where it is not installed), and a second node with torch_openreg 0.0.3's two devices,
advertised with what ``accelctl ray-resources`` prints there. Both run with torch's backend
autoload on, as on a user's machine (this test process keeps it off: the root ``conftest.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openregmachine import UserMachine, _require_wheel, shared_run

from .raycluster import ray_cluster

DRIVER = Path(__file__).with_name("ray_run.py")
#: The second driver, whose script ends on a worker's missing kernel (``kernels.json``).
KERNELS_DRIVER = Path(__file__).with_name("ray_kernels_run.py")
#: A hang guard only: the driver's three runs start a dozen processes that each import torch and
#: Ray (minutes on a loaded 2-core machine); nothing here is timed.
DRIVER_TIMEOUT_S = 1800

#: Two of Ray Train V2's own features that a run on loopback has no use for and that cost this
#: 2-core machine CPU in every run:
#: the preemption watcher, an actor per run that polls Ray for nodes being drained (a cloud's
#: reclaimed instances), and the metrics callbacks, which export figures no one reads here. The
#: bridge uses neither. Set for the driver (where Ray Train chooses its callbacks) and the nodes.
RAY_TRAIN_SETTINGS = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
}

#: The nodes' environment beyond the tests' own: Ray prestarts no idle workers (each would
#: import Ray on this 2-core machine for nothing), out-of-tree torch backends load, and Ray
#: finds the shell it starts its workers with (the tests' PATH is the interpreter's folder).
NODE_VARIABLES = {
    "RAY_prestart_worker_first_driver": "0",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
    "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
    **RAY_TRAIN_SETTINGS,
}


def run_on_a_cluster(out: Path) -> None:
    """Start the cluster, run the driver on it, stop it; leave what happened in ``out``.

    ``driver.json`` and the nodes' logs, for the tests to assert: a failure here is recorded, not
    raised, so that the other workers do not start the cluster again.

    It runs as on a Ray user's machine: a home whose ``~/.ray`` holds what ``ray.init()`` leaves
    there (an ``auth_token``), which the cluster's processes must not read (they have a home of
    their own, ``RayCluster.home``).
    """
    user_home = out / "user-home"
    (user_home / ".ray").mkdir(parents=True)
    (user_home / ".ray" / "auth_token").write_text("a-token-of-another-cluster\n")
    machine = UserMachine([])
    node_env = machine.environ(HOME=str(user_home), **NODE_VARIABLES)
    advertised = machine.run(
        sys.executable, "-m", "accelctl", "ray-resources", "--accelerator", "openreg",
        HOME=str(user_home), **NODE_VARIABLES,
    )  # fmt: skip
    record = {"ray_resources": advertised.stdout, "ray_resources_stderr": advertised.stderr}
    try:
        resources = json.loads(advertised.stdout)
        head_env = machine.environ(
            ACCELCTL_DISABLE="privateuse1", HOME=str(user_home), **NODE_VARIABLES
        )
        with ray_cluster(head_env, node_env, resources, logs=out) as cluster:
            driver_env = machine.environ(HOME=str(cluster.home), **RAY_TRAIN_SETTINGS)
            done = subprocess.run(
                [sys.executable, str(DRIVER), str(out), cluster.address],
                capture_output=True,
                text=True,
                env=driver_env,
                timeout=DRIVER_TIMEOUT_S,
            )
            kernels = subprocess.run(
                [sys.executable, str(KERNELS_DRIVER), str(out / "kernels"), cluster.address],
                capture_output=True,
                text=True,
                env=driver_env,
                timeout=DRIVER_TIMEOUT_S,
            )
        record.update(returncode=done.returncode, stderr=done.stderr[-6000:])
        (out / "kernels.json").write_text(
            json.dumps({"returncode": kernels.returncode, "stderr": kernels.stderr})
        )
    except Exception as exc:
        record.update(returncode=None, stderr=f"{type(exc).__name__}: {exc}")
    (out / "cluster.json").write_text(json.dumps(record))


@pytest.fixture(autouse=True)
def _excepthook_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """End with the test what a ``TorchConfig`` made in it installs as excepthook.

    accelctl's one-line hook for the script's end, and Ray's carrier of workers' errors.
    """
    from accelctl._launching import error_line as _error_line

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(_error_line, "_carriers", [])
    monkeypatch.setattr(_error_line, "_quiet", False)


@pytest.fixture(scope="module")
def ray_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the drivers' runs (``openreg``, ``cpu``, ``misconfigured``; ``kernels``)."""
    _require_wheel()
    out = shared_run(tmp_path_factory, "ray-runs", run_on_a_cluster)
    record = json.loads((out / "cluster.json").read_text())
    logs = "".join(
        f"\n--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(out.glob("*.log"))
    )
    assert record["returncode"] == 0, f"{record['stderr']}{logs}"
    return out

"""SLURM: what a 2-node launch under ``srun`` costs against the same ``accelctl launch`` by hand.

Starts the test suite's SLURM cluster (``tests/slurm/cluster.py``: munged, slurmctld, two slurmd
nodes on this machine; root, Debian's slurm-wlm, node names in /etc/hosts), then times, in
alternation (A B A B ...: the ratio is taken pair by pair, so that the machine's drift cancels):

- **A**: ``srun --nodes=2 --ntasks-per-node=1 accelctl launch --cpu --devices 1 SCRIPT``: the
  machines read from the job step;
- **B**: two ``accelctl launch --cpu --devices 1 --nnodes 2 --node-rank R --master-addr
  127.0.0.1 --master-port P SCRIPT`` started together by hand;

SCRIPT makes a Trainer and fits one step (the group forms, one all-reduce), so each figure is the
start-up of a 2-process run across two nodes: interpreters, torch, rendezvous, teardown.

    python -m bench.cluster --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
import accelctl

class Net(torch.nn.Linear):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

x = torch.randn(2, 4)
accelctl.Trainer(max_epochs=1, enable_checkpointing=False, enable_progress_bar=False,
                 root_dir=__import__("tempfile").mkdtemp()).fit(
    Net(4, 1), DataLoader(TensorDataset(x, x[:, :1]), batch_size=1))
"""
#: A hang guard for one launch.
GUARD_S = 300


def measure(repeats: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "slurm"))
    from cluster import free_port, missing, start_cluster

    reason = missing()
    if reason:
        raise SystemExit(f"bench.cluster: {reason}")
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-slurm-") as name:
        folder = Path(name)
        folder.chmod(0o755)  # munged wants its socket's folders open to all
        script = folder / "script.py"
        script.write_text(textwrap.dedent(SCRIPT))
        cluster = start_cluster(folder / "cluster")
        try:
            env = cluster.environ()
            launch = [sys.executable, "-m", "accelctl", "launch", "--cpu", "--devices", "1"]
            slurm = ["srun", "--nodes=2", "--ntasks-per-node=1", *launch, str(script)]

            def under_srun() -> float:
                started = time.perf_counter()
                done = subprocess.run(slurm, env=env, capture_output=True, timeout=GUARD_S)
                elapsed = time.perf_counter() - started
                assert done.returncode == 0, done.stderr.decode()[-2000:]
                return elapsed

            def by_hand() -> float:
                port = str(free_port())
                nodes = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port]
                started = time.perf_counter()
                processes = [
                    subprocess.Popen(
                        [*launch, *nodes, "--node-rank", str(rank), str(script)],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                    )
                    for rank in (0, 1)
                ]
                for process in processes:
                    _, err = process.communicate(timeout=GUARD_S)
                    assert process.returncode == 0, err.decode()[-2000:]
                return time.perf_counter() - started

            under_srun(), by_hand()  # warm-up: file caches, the cluster's first allocation
            pairs = [(under_srun(), by_hand()) for _ in range(repeats)]
        finally:
            cluster.stop()
    slurm_s = [a for a, _ in pairs]
    hand_s = [b for _, b in pairs]
    return {
        "repeats": repeats,
        "srun_launch_s": round(statistics.median(slurm_s), 3),
        "by_hand_s": round(statistics.median(hand_s), 3),
        "ratio": round(statistics.median(a / b for a, b in pairs), 3),
        "srun_launch_all_s": [round(s, 3) for s in slurm_s],
        "by_hand_all_s": [round(s, 3) for s in hand_s],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.repeats), indent=2))


if __name__ == "__main__":
    main()

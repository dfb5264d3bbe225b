"""Every rank of a run joins the same process group for each ``fit``, even after a failed fit.

Fit after fit, even after a fit that one rank failed alone (docs/design/process-groups.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Each rank fits five times in a row: both (A), rank 1 alone while rank 0 stays away (B: rank
#: 1's fit times out), both (C), both but rank 0's group fails before it meets rank 1's (D: rank
#: 1's times out in torch's rendezvous), both (E). A line of JSON per rank: what each fit did.
FITS = """
import json, os, sys, time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelctl

root, rank = Path(sys.argv[1]), int(os.environ["RANK"])
GUARD_S = 120  # a hang guard only


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(name, timeout_s=GUARD_S):
    os.environ["ACCELCTL_COLLECTIVE_TIMEOUT"] = str(timeout_s)
    torch.manual_seed(0)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    model = Net()
    trainer = accelctl.Trainer(accelerator="cpu", max_epochs=1, root_dir=root / name,
                               enable_checkpointing=False, enable_progress_bar=False)
    try:
        trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    except Exception as exc:
        return [type(exc).__name__, str(exc).splitlines()[0]]
    return ["weights", model.linear.weight.tolist()]


def wait_for(name):
    deadline = time.monotonic() + GUARD_S
    while not (root / name).exists():
        assert time.monotonic() < deadline, f"rank 1 never wrote {name}"
        time.sleep(0.05)


done = [fit("A")]
if rank == 1:
    done.append(fit("B", timeout_s=1))
    (root / "B-over").touch()
else:
    done.append(["stayed away"])
    wait_for("B-over")
done.append(fit("C"))
if rank == 0:
    init = dist.init_process_group

    def fails_once_rank_1_gave_up(*args, **kwargs):
        wait_for("D-over")
        raise RuntimeError("rank 0's group failed")

    dist.init_process_group = fails_once_rank_1_gave_up
    done.append(fit("D"))
    dist.init_process_group = init
else:
    done.append(fit("D", timeout_s=1))
    (root / "D-over").touch()
done.append(fit("E"))
print(json.dumps(done))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_the_ranks_meet_again_in_the_fit_after_one_that_a_rank_failed_alone(
    tmp_path: Path,
) -> None:
    """A rank whose fit timed out waiting for rank 0 joins rank 0's group in the next fit.

    Rank 0 stayed away, or failed its own fit. Were groups keyed by each process's own count, the
    two ranks would disagree after the timeout, and rank 0 would wait in gloo's connect for good.
    """
    script = tmp_path / "fits.py"
    script.write_text(textwrap.dedent(FITS))
    base = {key: value for key, value in os.environ.items() if not key.startswith("ACCELCTL_")}
    base.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    base.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")  # as torchrun sets them
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    results = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=600)  # a hang guard
            assert process.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            process.kill()  # where one hung: before this change, rank 0 in gloo's connect
            process.wait()
    first, second = results
    # A, C and E: both trained in one group (DDP: the same weights), D: both failed.
    for fit in (0, 2, 4):
        assert first[fit][0] == second[fit][0] == "weights", (fit, first[fit], second[fit])
        assert first[fit][1] == second[fit][1], fit
    # B: rank 1 alone waited for rank 0 to start the group, said so, and gave up.
    assert second[1][0] == "CollectiveTimeoutError", second[1]
    assert "waited 1 s for rank 0 to start this fit's process group" in second[1][1], second[1]
    assert first[1] == ["stayed away"]
    # D: rank 0's group failed; rank 1 timed out in torch's rendezvous waiting for it.
    assert first[3] == ["RuntimeError", "rank 0's group failed"], first[3]
    assert second[3][0] == "CollectiveTimeoutError", second[3]

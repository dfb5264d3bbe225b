"""``accelctl launch``: real processes (torchrun, gloo) where it counts, CliRunner for usage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from accelctl.cli.main import cli

TRAIN_SCRIPT = """
    import json, os, sys
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    import accelctl

    out = sys.argv[1]
    fail_rank = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(100 + rank)  # different initial weights: DDP must start from rank 0's

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 1)
            self.seen = []

        def training_step(self, batch, batch_idx):
            ids, x, y = batch
            if rank == fail_rank and batch_idx == 2:
                raise ValueError(f"rank {rank} was told to fail")
            self.seen.append(ids)
            return nn.functional.mse_loss(self.linear(x), y)

        def validation_step(self, batch, batch_idx):
            ids, x, y = batch
            return {"mse": nn.functional.mse_loss(self.linear(x), y), "seen": float(len(ids))}

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    data = TensorDataset(torch.arange(64), x, y)
    train = DataLoader(data, batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(torch.arange(10), x[:10], y[:10]), batch_size=4)

    model = Net()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = accelctl.Trainer(max_epochs=2, root_dir=out, log_every_n_steps=2)
    trainer.fit(model, train, val)
    seen_epoch0 = torch.cat(model.seen[: len(model.seen) // 2]).tolist()
    torch.save({"initial": initial, "final": model.state_dict()}, f"{out}/rank{rank}.pt")
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump({
            "global_rank": trainer.global_rank, "world_size": trainer.world_size,
            "device": str(trainer.device), "devices": [str(d) for d in trainer.devices],
            "accelerator": trainer.accelerator.name, "metrics": trainer.metrics,
            "seen_epoch0": seen_epoch0,
            "env": {k: os.environ.get(k) for k in ("ACCELCTL_ACCELERATOR", "ACCELCTL_DEVICES")},
        }, f)
"""


def run_launch(
    tmp_path: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``accelctl launch ARGS`` as a user runs it: a process of its own, output captured."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN_SCRIPT))
    env = {
        k: v
        for k, v in os.environ.items()
        if k == "ACCELCTL_HOOK_TIMEOUT" or not k.startswith("ACCELCTL_")  # keep the hang guard
    }
    command = [sys.executable, "-c", "from accelctl.cli import main; main()", "launch", *args]
    return subprocess.run(
        [part.replace("{script}", str(script)) for part in command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def load(out: Path, rank: int) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((out / f"rank{rank}.json").read_text())
    return result


@pytest.mark.slow
def test_two_gloo_ranks_train_to_identical_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, temporary = tmp_path / "out", tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    proc = run_launch(tmp_path, "--cpu", "--devices", "2", "{script}", str(out))
    assert proc.returncode == 0, proc.stderr
    # Nothing of the launch's own is left in the temporary folder (torchrun alone leaves a
    # torchelastic_* folder there at each run); torch's compile cache may stay, as it does.
    assert [p.name for p in temporary.iterdir() if not p.name.startswith("torchinductor_")] == []

    ranks = [load(out, 0), load(out, 1)]
    assert [r["global_rank"] for r in ranks] == [0, 1]
    assert {r["world_size"] for r in ranks} == {2}
    assert all(r["devices"] == ["cpu", "cpu"] and r["accelerator"] == "cpu" for r in ranks)
    assert all(r["env"] == {"ACCELCTL_ACCELERATOR": "cpu", "ACCELCTL_DEVICES": "2"} for r in ranks)
    # Each rank saw its own half of the data in an epoch; together, all of it once.
    seen0, seen1 = (set(r["seen_epoch0"]) for r in ranks)
    assert len(seen0) == len(seen1) == 32 and seen0 | seen1 == set(range(64))
    # Metrics were reduced across ranks: the same figures everywhere; validation counted each
    # of its 10 samples once although 10 does not split in batches of 4 per rank evenly.
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    assert ranks[0]["metrics"]["val_seen"] == pytest.approx((4 * 4 + 1 * 1) / 5)

    states = [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]
    assert any(  # the ranks started apart...
        not torch.equal(states[0]["initial"][k], states[1]["initial"][k])
        for k in states[0]["initial"]
    )
    for key in states[0]["final"]:  # ...and ended equal, and trained
        assert torch.equal(states[0]["final"][key], states[1]["final"][key])
        assert not torch.equal(states[0]["final"][key], states[0]["initial"][key])

    # rank 0 alone writes the metrics: 4 steps per epoch per rank, a line every 2, + 2 epoch lines
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(line["kind"], line["step"]) for line in lines] == [
        ("step", 2), ("step", 4), ("epoch", 4), ("step", 6), ("step", 8), ("epoch", 8)
    ]  # fmt: skip


@pytest.mark.slow
def test_a_failing_rank_stops_the_launch_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    proc = run_launch(tmp_path, "--cpu", "--devices", "2", "{script}", str(tmp_path), "1")
    assert proc.returncode == 1
    report = proc.stderr.strip().splitlines()[-1]
    assert report == (
        "accelctl launch: rank 1 of 2 failed (exit code 1): ValueError: rank 1 was told to fail; "
        "the other processes were stopped"
    )
    assert "Traceback" in proc.stderr  # the child's own traceback, above the report
    assert "Root Cause" not in proc.stderr  # and not torchrun's page-long report
    # The ranks' error records were read (above), then removed with their folder.
    assert [p.name for p in temporary.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.slow
def test_one_device_runs_the_script_alone_with_the_selection(tmp_path: Path) -> None:
    script = tmp_path / "alone.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            json.dump({"argv": sys.argv[1:], "name": __name__, "path0": sys.path[0],
                       "env": {k: os.environ.get(k) for k in
                               ("ACCELCTL_ACCELERATOR", "ACCELCTL_DEVICES", "RANK")}},
                      open("alone.json", "w"))
            if "--boom" in sys.argv:
                raise RuntimeError("boom in the only process")
            sys.exit(int(sys.argv[1]))
            """
        )
    )
    proc = run_launch(tmp_path, "--cpu", str(script), "3", "--devices", "x")
    assert proc.returncode == 3, proc.stderr  # the script's own status
    seen = json.loads((tmp_path / "alone.json").read_text())
    # options after SCRIPT are the script's; python's own rules for __name__ and sys.path[0]
    assert seen["argv"] == ["3", "--devices", "x"]
    assert seen["name"] == "__main__" and seen["path0"] == str(tmp_path)
    assert seen["env"] == {"ACCELCTL_ACCELERATOR": "cpu", "ACCELCTL_DEVICES": "1", "RANK": None}

    proc = run_launch(tmp_path, str(script), "0", "--boom")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "accelctl launch: alone.py failed (exit code 1): RuntimeError: boom in the only process"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cpu", "--accelerator", "cuda"], "--cpu means --accelerator cpu"),
        (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"], "is not below --nnodes 2"),
        (["--nnodes", "2"], "--nnodes 2 needs --master-addr"),
        (["--master-port", "70000"], "70000"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    script = tmp_path / "s.py"
    script.write_text("")
    result = CliRunner().invoke(cli, ["launch", *args, str(script)])
    assert result.exit_code == 2
    assert message in result.output


def test_a_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["launch", "--cpu", str(tmp_path / "nope.py")])
    assert result.exit_code == 2
    assert "nope.py" in result.output and "does not exist" in result.output


def test_several_devices_of_a_single_process_accelerator_are_refused(
    fake_site: Any, tmp_path: Path
) -> None:
    # Two indexed CPU devices and no distributed backend, like MPS.
    fake_site.install(
        "accelctl-solo", {"solo": "fakeplugins.single_process:SingleProcessAccelerator"}
    )
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('must not run')")
    result = CliRunner().invoke(
        cli, ["launch", "--accelerator", "solo", "--devices", "2", str(script)]
    )
    assert result.exit_code == 1
    assert "'solo' runs in a single process only" in result.output
    assert "--devices 1" in result.output


def test_torchruns_log_folder_is_removed_unless_torchruns_own_variables_are_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed.run as torchrun

    seen: list[tuple[str | None, bool]] = []

    def run(args: Any) -> None:  # torchrun's runner, recorded: no process starts
        seen.append((args.log_dir, bool(args.log_dir) and os.path.isdir(args.log_dir)))

    monkeypatch.setattr(torchrun, "run", run)
    script = tmp_path / "s.py"
    script.write_text("")
    launch = ["launch", "--cpu", "--devices", "2", str(script)]
    assert CliRunner().invoke(cli, launch).exit_code == 0
    [(ours, existed)] = seen
    assert ours is not None and existed and not os.path.exists(ours)  # made, then removed
    # Where torchrun's own variables are set, the log folder is theirs (and the ranks' output
    # there, under PET_REDIRECTS or PET_TEE): accelctl passes none.
    monkeypatch.setenv("PET_LOG_DIR", str(tmp_path / "mine"))
    assert CliRunner().invoke(cli, launch).exit_code == 0
    assert seen[1] == (str(tmp_path / "mine"), False)

"""A third-party plugin for torch_openreg works on every default path, or stops early.

A real out-of-tree backend: 2 devices, no distributed backend; where it stops, it stops with
accelctl's own error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openregmachine import UserMachine

from fakedists import FakeSite

pytestmark = [pytest.mark.openreg, pytest.mark.slow]


def test_list_shows_both_visible_devices(machine: UserMachine) -> None:
    done = machine.accelctl("list", "--json")
    assert done.returncode == 0, done.stderr
    row = {r["name"]: r for r in json.loads(done.stdout)}["openreg"]
    assert (row["available"], row["device_count"], row["error"]) == (True, 2, None)
    assert row["distribution"] == "accelctl-openreg"


def test_validate_passes_with_the_device_checks_run(machine: UserMachine) -> None:
    done = machine.accelctl("validate", "openreg", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    (report,) = json.loads(done.stdout)
    statuses = {check["check"]: check["status"] for check in report["checks"]}
    for check in ("devices_auto", "devices_one", "device_stats", "distributed_backend"):
        assert statuses[check] == "pass", report


def test_auto_resolves_to_one_openreg_device(machine: UserMachine) -> None:
    """Item 2: "auto" must not pick two devices of an accelerator that runs in one process."""
    done = machine.accelctl("resolve", "--json")
    assert done.returncode == 0, done.stderr
    selection = json.loads(done.stdout)
    assert (selection["accelerator"], selection["devices"]) == ("openreg", ["openreg:0"])
    assert selection["distributed_backend"] is None


def test_explicit_specs_still_reach_the_second_device(machine: UserMachine) -> None:
    done = machine.accelctl("resolve", "--accelerator", "openreg", "--devices", "1,", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["devices"] == ["openreg:1"]


TRAIN = """
    import json, torch, accelctl

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def train(**trainer_args):
        torch.manual_seed(0)
        x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
        loader = torch.utils.data.DataLoader(list(zip(x, y)), batch_size=16)
        model = Net()
        trainer = accelctl.Trainer(enable_progress_bar=False, root_dir="{root}", **trainer_args)
        trainer.fit(model, loader)
        return trainer, model
"""


def test_the_default_trainer_trains_on_openreg_with_the_cpus_loss(
    machine: UserMachine, tmp_path: Path
) -> None:
    """Item 2: installing one plugin must not break every default Trainer() on the machine."""
    result = machine.python(
        TRAIN.format(root=tmp_path)
        + """
    trainer, model = train()
    cpu, _ = train(accelerator="cpu")
    print(json.dumps({
        "accelerator": trainer.accelerator.name,
        "device": str(trainer.device),
        "parameter_device": str(next(model.parameters()).device),
        "loss": trainer.metrics["train_loss"],
        "cpu_loss": cpu.metrics["train_loss"],
    }))
    """
    )
    assert result["accelerator"] == "openreg"
    assert result["device"] == result["parameter_device"] == "openreg:0"
    assert result["loss"] == pytest.approx(result["cpu_loss"], rel=1e-5)


def test_two_devices_are_refused_when_the_trainer_is_made(
    machine: UserMachine, tmp_path: Path
) -> None:
    """Item 3: the mismatch is known at construction, so it is refused there."""
    result = machine.python(
        TRAIN.format(root=tmp_path)
        + """
    try:
        accelctl.Trainer(accelerator="openreg", devices=2)
    except accelctl.ProcessSetupError as error:
        print(json.dumps({"refused": str(error)}))
    else:
        print(json.dumps({"refused": None}))
    """
    )
    assert result["refused"] is not None
    assert "runs in a single process only" in result["refused"]
    assert "distributed_backend is None" in result["refused"]


def test_validate_fails_a_declared_backend_that_cannot_carry_openreg_tensors(
    tmp_path: Path, openreg_plugin_target: Path
) -> None:
    """A plugin that claims a backend torch lacks for openreg is refused before ``launch`` starts.

    gloo refuses openreg tensors, so `launch --devices 2` would fail in every rank: the same device
    under a plugin that claims such a backend.
    """
    site = FakeSite(tmp_path / "site")
    site.install("accelctl-opengloo", {"opengloo": "fakeplugins.openreg_gloo:GlooForOpenreg"})
    done = UserMachine([Path(folder) for folder in site.path]).accelctl(
        "validate", "opengloo", "--json"
    )
    assert done.returncode == 1, done.stdout
    (report,) = json.loads(done.stdout)
    result = {check["check"]: check for check in report["checks"]}["distributed_backend"]
    assert result["status"] == "fail"
    assert "does not support 'openreg' tensors" in result["detail"]

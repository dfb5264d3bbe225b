"""Lightning's Trainer through the bridge on torch_openreg, with Lightning's defaults.

A real out-of-tree backend: 2 devices, no distributed backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from openregmachine import REFUSED, UserMachine, assert_single_process_refusal

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

pytest.importorskip("lightning")

#: Shared by the user programs below: a LightningModule whose forward is a matmul (openreg's
#: autocast casts ``mm``), recording where and in which dtype each step ran.
MODULE = """
    import json, lightning, torch
    from accelctl.integrations.lightning import LightningAccelerator, register_all

    class Net(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.weight = torch.nn.Parameter(torch.randn(4, 1))
            self.steps = []

        def forward(self, x):
            return x @ self.weight

        def training_step(self, batch, batch_idx):
            x, y = batch
            out = self(x)
            self.steps.append((str(out.device), str(out.dtype)))
            loss = torch.nn.functional.mse_loss(out.float(), y)
            self.steps[-1] += (float(loss.detach()),)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def loader():
        generator = torch.Generator().manual_seed(1)
        x = torch.randn(64, 4, generator=generator)
        y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
        return torch.utils.data.DataLoader(list(zip(x, y)), batch_size=16)

    QUIET = dict(enable_progress_bar=False, enable_checkpointing=False,
                 enable_model_summary=False, logger=False, max_epochs=2)

    def fit(accelerator, **options):
        trainer = lightning.Trainer(accelerator=accelerator, **QUIET, **options)
        model = Net()
        trainer.fit(model, loader())
        return trainer, model
"""


def test_the_readme_forms_train_on_openreg_with_lightnings_defaults(machine: UserMachine) -> None:
    """Without strategy or devices, the instance and the name both train on openreg:0 as on the CPU.

    The losses are those of the same model on the CPU.
    """
    result = machine.python(
        MODULE
        + """
    trainer, model = fit(LightningAccelerator("openreg"))
    registration = register_all()
    by_name, named_model = fit("openreg")
    _, cpu_model = fit("cpu")
    print(json.dumps({
        "root": str(trainer.strategy.root_device),
        "devices": trainer.num_devices,
        "steps": model.steps,
        "registered": registration.registered,
        "named_root": str(by_name.strategy.root_device),
        "named_steps": named_model.steps,
        "cpu_steps": cpu_model.steps,
    }))
    """
    )
    assert result["root"] == result["named_root"] == "openreg:0"
    assert result["devices"] == 1  # devices="auto" without a distributed backend
    assert "openreg" in result["registered"]
    for steps in (result["steps"], result["named_steps"]):
        assert {(device, dtype) for device, dtype, _ in steps} == {("openreg:0", "torch.float32")}
        assert [loss for *_, loss in steps] == pytest.approx(
            [loss for *_, loss in result["cpu_steps"]], rel=1e-5
        )
    assert result["steps"][-1][2] < 0.5 * result["steps"][0][2]


def test_the_second_device_is_reachable_by_index(machine: UserMachine) -> None:
    result = machine.python(
        MODULE
        + """
    trainer, model = fit(LightningAccelerator("openreg"), devices=[1])
    print(json.dumps({"devices": sorted({device for device, *_ in model.steps})}))
    """
    )
    assert result["devices"] == ["openreg:1"]


def test_two_devices_are_refused_when_the_trainer_is_made(machine: UserMachine) -> None:
    """Item 5: accelctl's error at construction, not torch's in two dying ranks."""
    result = machine.python(
        MODULE
        + """
    import accelctl
    refused = {}
    register_all()
    for accelerator in (LightningAccelerator("openreg"), "openreg"):
        for options in ({"devices": 2}, {"devices": 1, "strategy": "ddp_spawn"}):
            try:
                lightning.Trainer(accelerator=accelerator, **options)
            except accelctl.AccelctlError as error:
                refused[f"{accelerator!s:.12}-{options}"] = type(error).__name__, str(error)
            else:
                refused[f"{accelerator!s:.12}-{options}"] = None
    print(json.dumps(refused))
    """
    )
    assert len(result) == 4
    for key, outcome in result.items():
        assert outcome is not None, key
        name, message = outcome
        assert name == "ProcessSetupError"
        assert "'openreg' runs in a single process only" in message
        assert "distributed_backend is None" in message


def test_bf16_mixed_autocasts_on_openreg(machine: UserMachine) -> None:
    """Item 8: Lightning would autocast on 'cuda' (disabled here) and train in float32."""
    result = machine.python(
        MODULE
        + """
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, model = fit(LightningAccelerator("openreg"), precision="bf16-mixed")
    print(json.dumps({
        "autocast_device": trainer.precision_plugin.device,
        "steps": model.steps,
        "warnings": [str(w.message) for w in caught if "autocast" in str(w.message).lower()],
    }))
    """
    )
    assert result["autocast_device"] == "openreg"
    assert {(device, dtype) for device, dtype, _ in result["steps"]} == {
        ("openreg:0", "torch.bfloat16")
    }
    assert result["warnings"] == []


def test_a_spawned_process_rebuilds_the_accelerator_before_openreg_devices(
    machine: UserMachine, tmp_path: Path
) -> None:
    """With torch's autoload off, ddp_spawn's worker unpickles the accelerator before the devices.

    The openreg device type exists only once the plugin imported torch_openreg; unpickling the
    accelerator first lets the plugin detect.
    """
    payload = tmp_path / "payload.pickle"
    machine.python(
        f"""
    import json, pickle, torch
    from accelctl.integrations.lightning import LightningAccelerator
    accelerator = LightningAccelerator("openreg")
    devices = type(accelerator).get_parallel_devices([1])
    open({str(payload)!r}, "wb").write(pickle.dumps((accelerator, devices)))
    print(json.dumps(None))
    """
    )
    result = machine.python(
        f"""
    import json, pickle, torch
    try:
        torch.device("openreg", 0)
        known_before = True
    except RuntimeError:
        known_before = False
    accelerator, devices = pickle.load(open({str(payload)!r}, "rb"))
    print(json.dumps({{"known_before": known_before, "name": accelerator.name(),
                      "devices": [str(d) for d in devices]}}))
    """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result == {"known_before": False, "name": "openreg", "devices": ["openreg:1"]}


def test_two_devices_without_a_backend_are_refused_when_the_trainer_is_made(
    no_backend_machine: UserMachine,
) -> None:
    # torch_openreg 0.0.1: torch maps no backend to openreg, so privateuse1 has none.
    message = no_backend_machine.python(
        REFUSED
        + """
    import lightning
    from accelctl.integrations.lightning import LightningAccelerator
    print(json.dumps(refused(
        lambda: lightning.Trainer(accelerator=LightningAccelerator("openreg"), devices=2)
    )))
    """
    )
    assert_single_process_refusal(message)

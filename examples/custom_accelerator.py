"""Pass an accelerator straight to the Trainer: no plugin package, no entry point.

Lightning's RFC "Support passing pluggable Accelerators to Trainer" asked for
``Trainer(accelerator=NewSOTAAccelerator(), devices=4)``. With accelctl, any
:class:`accelctl.Accelerator` subclass works that way; its methods are its hooks. This one is
deliberately ordinary so that it runs anywhere: its torch device is the CPU. A vendor's class
looks the same with its own device type (``"hpu"``, ``"xla"``, ...), count and stats:

.. code-block:: python

    class HPUAccelerator(accelctl.Accelerator):
        name = "hpu"
        distributed_backend = "hccl"

        def detect(self):
            return importlib.util.find_spec("habana_frameworks") is not None

        def auto_device_count(self):
            import habana_frameworks.torch.hpu as hpu

            return hpu.device_count()

    trainer = accelctl.Trainer(accelerator=HPUAccelerator(), devices=4)

Run: ``python examples/custom_accelerator.py`` (several processes:
``accelctl launch --devices 2 examples/custom_accelerator.py``: the launcher starts 2 processes
and each passes the instance itself). The launcher cannot see an instance made in the script: it
selects what ``"auto"`` means on the machine (another accelerator, where one is installed, such
as openreg or CUDA) and hands that selection to the children; the instance is not what it
selected, so ``devices="auto"`` on it is one device per process of the launch, as under a plain
``torchrun``. A ``distributed_backend`` torch does not have for the instance's devices is refused
in each process when the Trainer is made, naming torch's backend for them (``gloo`` for the CPU).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelctl


class CPUAsCustomAccelerator(accelctl.Accelerator):
    """The CPU, dressed as a third-party accelerator: one process per "device", gloo between them.

    Only :meth:`detect` and :meth:`auto_device_count` are required; the rest override the base
    class's defaults (an indexed device of type :attr:`device_type`) to count processes instead.
    """

    name = "cpu-custom"
    device_type = "cpu"
    description = "the CPU, as an accelerator passed to the Trainer as an instance"
    distributed_backend = "gloo"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1

    def parse_devices(self, devices: Any) -> int:
        # The core's shared parser: "auto" -> 1, k / "k" -> k, teaching errors for the rest.
        return accelctl.parse_process_count(devices, accelerator=self.name)

    def get_parallel_devices(self, devices: int) -> list[torch.device]:
        return [torch.device(self.device_type)] * devices

    def device_stats(self, device: torch.device) -> dict[str, int | float]:
        # Contract keys where they apply; an accelerator's own figures carry its name.
        return {"cpu-custom.threads": torch.get_num_threads()}

    def setup_device(self, device: torch.device) -> None:
        self.calls.append(f"setup_device({device})")

    def teardown(self) -> None:
        self.calls.append("teardown()")


class Regressor(nn.Module):
    """A two-layer network fitting y = sin(3x) + x / 2."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"mse": F.mse_loss(self(x), y)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def data(count: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(count, 1, generator=generator) * 4 - 2
    return TensorDataset(x, torch.sin(3 * x) + x / 2)


def main(epochs: int = 20, root_dir: str = "runs/custom_accelerator") -> dict[str, float]:
    torch.manual_seed(0)
    accelerator = CPUAsCustomAccelerator()
    trainer = accelctl.Trainer(accelerator=accelerator, max_epochs=epochs, root_dir=root_dir)
    train = DataLoader(data(2048, seed=1), batch_size=64, shuffle=True)
    val = DataLoader(data(512, seed=2), batch_size=256)
    started = time.perf_counter()
    model = Regressor()
    trainer.fit(model, train, val)
    if trainer.is_global_zero:
        print(
            f"trained on {trainer.accelerator.name!r} ({trainer.world_size} process(es), "
            f"device {trainer.device}) in {time.perf_counter() - started:.1f} s: "
            f"validation mse {trainer.metrics['val_mse']:.4f}"
        )
        print("hooks called on this process:", ", ".join(accelerator.calls))
    return trainer.metrics


if __name__ == "__main__":
    main(epochs=int(os.environ.get("EPOCHS", "20")))

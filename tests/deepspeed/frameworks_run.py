"""DeepSpeed started by Lightning, Accelerate and transformers through their bridges, as a script.

``python frameworks_run.py OUT ACCELERATOR RUNS [SCRIPT ...]`` under a launcher (``accelctl launch
--accelerator ACCELERATOR --devices 2``). ``RUNS``: ``"lightning-2,accelerate-3,..."``, a framework
and a ZeRO stage each, run one after the other in the same processes: the same tiny MLP (the same
initial weights), the same 32 samples drawn on the CPU, split between the ranks by the framework's
own sampler, 4 per step, AdamW, one epoch (4 steps). Each rank writes ``OUT/<run>/rank<r>.json``
(where it ran, its losses) and ``rank<r>.pt`` (the full weights at the end, gathered under ZeRO-3).
Nothing in it names a device: the bridges place it. Then each ``SCRIPT`` (the docs' examples) runs
in the same processes, as ``python SCRIPT`` would run it.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import Any

import deepspeed
import torch

#: Where each forward of the current run's model ran: its input's device, its weights'.
RAN: set[tuple[str, str]] = set()


def network() -> torch.nn.Module:
    """The model, with the same initial weights every time; its forwards noted in :data:`RAN`."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))

    def note(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        RAN.add((str(inputs[0].device), str(module[0].weight.device)))

    model.register_forward_pre_hook(note)
    return model


def samples() -> tuple[torch.Tensor, torch.Tensor]:
    """32 inputs and targets, drawn on the CPU from a seed of their own."""
    data = torch.Generator().manual_seed(1000)
    return torch.randn(32, 8, generator=data), torch.randn(32, 4, generator=data)


def lightning_run(accelerator: str, stage: int) -> tuple[Any, list[float], dict[str, Any]]:
    """``Trainer(strategy="deepspeed_stage_<stage>")`` on ``LightningAccelerator(accelerator)``."""
    import lightning

    from accelctl.integrations.lightning import LightningAccelerator

    class Regression(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = network()
            self.losses: list[float] = []

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=0.01)

    module = Regression()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*samples()), batch_size=4)
    trainer = lightning.Trainer(
        accelerator=LightningAccelerator(accelerator), devices=2,
        strategy=f"deepspeed_stage_{stage}", max_epochs=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, loader)
    strategy = trainer.strategy
    seen = {"strategy": type(strategy).__name__, "root_device": str(strategy.root_device)}
    return strategy.deepspeed_engine, module.losses, seen


def accelerate_run(stage: int) -> tuple[Any, list[float], dict[str, Any]]:
    """``Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage))`` of the bridge."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DeepSpeedPlugin

    from accelctl.integrations.accelerate import Accelerator

    AcceleratorState._reset_state(reset_partial_state=True)  # a new run in this process
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage))
    model = network()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*samples()), batch_size=4)
    engine, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(engine(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    seen = {"distributed_type": str(accelerator.distributed_type)}
    return engine, losses, seen


def transformers_run(out: Path, stage: int) -> tuple[Any, list[float], dict[str, Any]]:
    """transformers' ``Trainer`` with the bridge's ``TrainingArguments(deepspeed=config)``."""
    from accelerate.state import AcceleratorState
    from transformers import Trainer

    from accelctl.integrations.transformers import TrainingArguments

    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = network()

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    AcceleratorState._reset_state(reset_partial_state=True)  # a new run in this process
    config = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "zero_optimization": {"stage": stage},
        "gradient_clipping": "auto",  # max_grad_norm
    }
    # ZeRO-3 computes the gradients' norm in float64 where the device has it (the CPU) and in
    # float32 where not (openreg): clipped by it, the runs would differ by its rounding.
    clip = 1.0 if stage < 3 else 0.0
    args = TrainingArguments(
        str(out / "trainer"), deepspeed=config, per_device_train_batch_size=4,
        num_train_epochs=1, learning_rate=0.01, lr_scheduler_type="constant",
        max_grad_norm=clip, logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    x, y = samples()
    dataset = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    trainer = Trainer(model=Regression(), args=args, train_dataset=dataset)
    trainer.train()
    # The logged loss is the mean over the ranks (transformers gathers it).
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    state = args.distributed_state
    seen = {"args_device": str(args.device), "distributed_type": str(state.distributed_type)}
    return trainer.model_wrapped, losses, seen


def full_weights(engine: Any) -> dict[str, torch.Tensor]:
    """The model's whole weights on the CPU (gathered from the ranks under ZeRO-3)."""
    parameters = list(engine.module.parameters())
    sharded = engine.zero_optimization_stage() == 3
    with deepspeed.zero.GatheredParameters(parameters, enabled=sharded):
        return {n: p.detach().to("cpu").clone() for n, p in engine.module.named_parameters()}


def run(out: Path, accelerator: str, name: str) -> None:
    framework, _, stage = name.partition("-")
    RAN.clear()
    if framework == "lightning":
        engine, losses, seen = lightning_run(accelerator, int(stage))
    elif framework == "accelerate":
        engine, losses, seen = accelerate_run(int(stage))
    else:
        engine, losses, seen = transformers_run(out / name, int(stage))
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    rank = torch.distributed.get_rank()
    torch.save(full_weights(engine), folder / f"rank{rank}.pt")
    chosen = deepspeed.accelerator.get_accelerator()
    report = {
        **seen,
        "rank": rank,
        "world_size": torch.distributed.get_world_size(),
        "engine": type(engine).__name__,
        "stage": engine.zero_optimization_stage(),
        "clipping": engine.gradient_clipping(),
        "device": str(engine.device),
        "ran": sorted(RAN),  # Lightning moves the model back to the CPU when the fit ends
        "accelerator": type(chosen).__name__,
        "accelctl": getattr(getattr(chosen, "handle", None), "name", None),
        "backend": torch.distributed.get_backend(),
        "losses": losses,
    }
    (folder / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    for name in sys.argv[3].split(","):
        run(Path(sys.argv[1]), sys.argv[2], name)
    for script in sys.argv[4:]:  # users' scripts (the docs'), run as they stand, one by one
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
        runpy.run_path(script, run_name="__main__")

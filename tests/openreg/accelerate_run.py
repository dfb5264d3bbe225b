"""HF Accelerate for the openreg tests: ``python accelerate_run.py OUT MODE [ACCELERATOR]``.

MODE ``single`` (one process): ``Accelerator("openreg", mixed_precision="bf16")``, an epoch,
``save_state``, an epoch, ``load_state`` and that epoch again; ``set_seed``. MODE ``processes``
(under ``accelctl launch`` or ``accelerate launch``, 2 processes): ``Accelerator(ACCELERATOR)``,
2 epochs of DDP, then ``gather``, ``reduce``, ``wait_for_everyone``. MODE ``cpu`` (under
``accelerate launch``, 2 processes): Accelerate's own multi-CPU run (``accelerate.Accelerator(
cpu=True)``), then the same on accelctl's ``cpu`` plugin (``Accelerator("cpu")``). MODE ``cnn`` and
``attention`` (one process, ``Accelerator("auto")``: ``ACCELCTL_ACCELERATOR`` chooses): a small
CNN (``Conv2d``), or a model calling ``scaled_dot_product_attention``, 4 steps of SGD; where
``accelctl.MissingKernelError`` stops it (a kernel torch_openreg lacks: issue 45), its parts are
the report. Every process writes ``OUT/<run>/rank<r>.pt`` (its final weights) and
``rank<r>.json``.
"""

import json
import sys
from pathlib import Path

import accelerate
import torch
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import set_seed

import accelctl
from accelctl._kernels.setup import fallback_calls
from accelctl.integrations import accelerate as bridge

OUT, MODE = Path(sys.argv[1]), sys.argv[2]


def model_and_data(dropout: float = 0.0):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(8, 1)
    )
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    data = torch.utils.data.TensorDataset(
        torch.arange(64), x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    )
    return model, torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)


def train(accelerator, dropout: float = 0.0, epochs: int = 2):
    """Prepare and train ``epochs`` epochs; return what ran where and the sample ids seen.

    What ran where is the first layer's outputs; the ids are this process's.
    """
    model, loader = model_and_data(dropout)
    ran, seen = set(), []

    def record(module, inputs, output):
        autocast = torch.is_autocast_enabled(output.device.type)
        ran.add((str(output.device), str(output.dtype), autocast))

    model[0].register_forward_hook(record)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    # Made before prepare, as Accelerate's examples do: it must step the prepared model.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.initial = initial

    def epoch():
        for ids, x, y in loader:
            seen.extend(ids.tolist())
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    for _ in range(epochs):
        epoch()
    return model, epoch, sorted(ran), seen


def write(run: str, acc, model, **report) -> None:
    folder = OUT / run
    folder.mkdir(parents=True, exist_ok=True)
    rank = acc.process_index
    unwrapped = acc.unwrap_model(model)
    state = {k: v.cpu() for k, v in unwrapped.state_dict().items()}
    initial = model.initial
    report["trained"] = all(not torch.equal(state[k], initial[k]) for k in state)
    torch.save(state, folder / f"rank{rank}.pt")
    report.update(
        device=str(acc.device),
        distributed_type=str(acc.distributed_type),
        num_processes=acc.num_processes,
        process_index=rank,
        backend=acc.state.backend,
        wrapped=type(model).__name__,
        adapted=bridge.ADAPTED,
    )
    (folder / f"rank{rank}.json").write_text(json.dumps(report))


def single() -> None:
    accelerator = bridge.Accelerator("openreg", mixed_precision="bf16")
    device_rng = torch.get_device_module(accelerator.device.type)
    model, epoch, ran, _ = train(accelerator, dropout=0.5, epochs=1)
    accelerator.save_state(OUT / "checkpoint")
    saved_rng = device_rng.get_rng_state(accelerator.device)
    epoch()  # from the saved state, with its dropout masks drawn on the device
    straight = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    device_rng.manual_seed(1234)  # moves the device's generator elsewhere, for load_state to undo
    accelerator.load_state(OUT / "checkpoint")
    restored_rng = torch.equal(device_rng.get_rng_state(accelerator.device), saved_rng)
    epoch()
    resumed = accelerator.unwrap_model(model).state_dict()
    set_seed(7)
    draws = [torch.rand(3, device=accelerator.device).tolist()]
    set_seed(7)
    draws.append(torch.rand(3, device=accelerator.device).tolist())
    write(
        "single",
        accelerator,
        model,
        accelerator=accelerator.accelctl_accelerator.name,
        ran=ran,
        mixed_precision=accelerator.mixed_precision,
        resumed_exactly=all(torch.equal(straight[k], resumed[k]) for k in straight),
        device_rng_restored=restored_rng,
        seeded_draws=draws,
    )


def processes(name: str) -> None:
    accelerator = bridge.Accelerator(name)
    model, _, ran, seen = train(accelerator)
    rank = accelerator.process_index
    gathered = accelerator.gather(torch.tensor([rank], device=accelerator.device))
    one = torch.tensor([float(rank + 1)], device=accelerator.device)
    total = accelerator.reduce(one.clone(), reduction="sum")
    mean = accelerator.reduce(one.clone(), reduction="mean")
    accelerator.wait_for_everyone()
    write(
        "processes",
        accelerator,
        model,
        accelerator=accelerator.accelctl_accelerator.name,
        ran=ran,
        seen_epoch0=seen[:32],
        group_backend=torch.distributed.get_backend(),
        gathered=gathered.tolist(),
        sum=total.item(),
        mean=mean.item(),
    )
    accelerator.end_training()


def cpu() -> None:
    own = accelerate.Accelerator(cpu=True)
    model, _, ran, seen = train(own)
    write("own", own, model, ran=ran, seen_epoch0=seen[:32])
    # The same processes and process group (a second group made here would rendezvous on the
    # first one's keys in torchrun's store), a new Accelerate state.
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    plugin = bridge.Accelerator("cpu")
    model, _, ran, seen = train(plugin)
    name = plugin.accelctl_accelerator.name
    write("plugin", plugin, model, ran=ran, seen_epoch0=seen[:32], accelerator=name)
    # Both ranks leave the group together: a rank that destroyed it and exited while the other
    # still used it made gloo abort the other ("terminate called without an active exception"),
    # seen once under the suite's load.
    plugin.wait_for_everyone()
    plugin.end_training()


class SmallCNN(torch.nn.Module):
    """A convolution (``features.0``), then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Attention(torch.nn.Module):
    """Self-attention through ``scaled_dot_product_attention``, as transformers' default."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)
        mixed = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(mixed.transpose(1, 2).flatten(2)).mean(1)


def kernels(run: str) -> None:
    """``run`` (``cnn`` or ``attention``) on the chosen accelerator, 4 steps of SGD."""
    accelerator = bridge.Accelerator("auto")
    torch.manual_seed(0)
    model = SmallCNN() if run == "cnn" else Attention()
    generator = torch.Generator().manual_seed(0)
    shape = (16, 1, 8, 8) if run == "cnn" else (16, 5, 8)
    data = torch.utils.data.TensorDataset(
        torch.randn(*shape, generator=generator), torch.randint(0, 3, (16,), generator=generator)
    )
    model.initial = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    prepared, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    name = accelerator.accelctl_accelerator.name
    try:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(prepared(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    except accelctl.MissingKernelError as error:
        report = {"accelerator": name, "error": str(error), "parts": error.parts()}
        report["cause"] = type(error.__cause__).__name__
        (OUT / run).mkdir(parents=True, exist_ok=True)
        (OUT / run / "rank0.json").write_text(json.dumps(report))
        return
    calls = fallback_calls(accelerator.device.type)
    write(run, accelerator, prepared, accelerator=name, cpu_fallback_calls=calls)


if __name__ == "__main__":
    if MODE == "single":
        single()
    elif MODE == "processes":
        processes(sys.argv[3])
    elif MODE in ("cnn", "attention"):
        kernels(MODE)
    else:
        cpu()

    # As a careful script ends: a process group left to the interpreter's exit can abort the
    # process there (its backend's threads still running while its objects are destroyed).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()

"""transformers' Trainer for the openreg tests: ``python transformers_run.py OUT MODE ACCELERATOR``.

A tiny GPT-2 (2 layers, 16-dim embedding, its output layer tied to the embedding, no dropout),
built here, trained 4 steps on made-up tokens by an unchanged ``transformers.Trainer`` with the
bridge's ``TrainingArguments(accelerator=ACCELERATOR)``.

MODE ``single`` (one process): the bridge's Accelerate ``Accelerator`` is made first, then the
arguments (the order the issue found broken); a float32 run, then, in the same process, a
``bf16`` run with new arguments. MODE ``processes`` (under a launcher, 2 processes): one float32
run. MODE ``fsdp`` (under a launcher, 2 processes): one float32 run sharded with FSDP2 through
transformers' own arguments (``fsdp="full_shard"``, each ``GPT2Block`` a unit); ``fsdp1`` asks
for FSDP1 the same way. MODE ``sdpa`` (one process, or 2 under a launcher): one float32 run of
the model with transformers' default attention (``scaled_dot_product_attention``), which
torch_openreg lacks (issue 45). Every run writes
``OUT/<run>/rank<r>.pt`` (its final weights, whole) and ``rank<r>.json``.
"""

import json
import sys
from pathlib import Path

import torch
from accelerate.state import AcceleratorState, GradientState
from torch.distributed.tensor import DTensor
from transformers import GPT2Config, GPT2LMHeadModel, Trainer

from accelctl._kernels.setup import fallback_calls
from accelctl.integrations import accelerate as bridge
from accelctl.integrations.transformers import ADAPTED, TrainingArguments

OUT, MODE, ACCELERATOR = Path(sys.argv[1]), sys.argv[2], sys.argv[3]


def model_and_data(attention: str | None = "eager"):
    """The model; ``attention=None``: transformers' default attention (sdpa)."""
    torch.manual_seed(0)
    # torch_openreg (0.0.2, 0.0.3) has no scaled_dot_product_attention: eager, unless asked.
    chosen = {} if attention is None else {"attn_implementation": attention}
    config = GPT2Config(
        n_layer=2, n_embd=16, n_head=2, vocab_size=32, n_positions=16,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        **chosen,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(0, 32, (32, 8), generator=torch.Generator().manual_seed(0))
    return model, [{"input_ids": row, "labels": row} for row in tokens]


def train(run: str, attention: str | None = "eager", **arguments) -> Trainer:
    """Train the model 4 steps (4 sequences per process and step); write what ran where."""
    args = TrainingArguments(
        str(OUT / run / "output"), accelerator=ACCELERATOR, max_steps=4,
        per_device_train_batch_size=4, learning_rate=0.01, seed=0, report_to=[],
        save_strategy="no", logging_strategy="no", dataloader_num_workers=0,
        disable_tqdm=True, **arguments,
    )  # fmt: skip
    model, data = model_and_data(attention)
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    ran = set()

    def record(module, inputs, output):
        autocast = torch.is_autocast_enabled(output.device.type)
        ran.add((str(output.device), str(output.dtype), autocast))

    model.transformer.h[0].mlp.c_fc.register_forward_hook(record)  # a matmul (addmm) inside
    trainer = Trainer(model, args, train_dataset=data)
    trainer.train()
    # Whole tensors: a sharded parameter gathered from both processes (a collective).
    state = {key: whole(value).cpu() for key, value in model.state_dict().items()}
    folder = OUT / run
    folder.mkdir(parents=True, exist_ok=True)
    rank = args.process_index
    torch.save(state, folder / f"rank{rank}.pt")
    report = {
        "accelerator": args.accelctl_accelerator.name,
        "adapted": ADAPTED,
        "device": str(args.device),
        "n_gpu": args.n_gpu,
        "parallel_mode": str(args.parallel_mode),
        "distributed_type": str(trainer.accelerator.distributed_type),
        "num_processes": trainer.accelerator.num_processes,
        "process_index": rank,
        "world_size": args.world_size,
        "backend": trainer.accelerator.state.backend,
        "mixed_precision": trainer.accelerator.mixed_precision,
        "wrapped": type(trainer.model_wrapped).__name__,
        "ran": sorted(ran),
        "parameters_on": sorted({str(p.device) for p in model.parameters()}),
        "parameter_classes": sorted({type(p).__name__ for p in model.parameters()}),
        "mesh": sorted(
            {p.device_mesh.device_type for p in model.parameters() if isinstance(p, DTensor)}
        ),
        "tied": model.lm_head.weight is model.transformer.wte.weight,
        "trained": all(not torch.equal(state[key], whole(initial[key]).cpu()) for key in state),
        "attention": model.config._attn_implementation,
        "cpu_fallback_calls": fallback_calls(args.device.type),
    }
    if attention is None:  # transformers' default: the attention itself against the CPU's
        report["attention_as_on_cpu"] = attention_as_on_cpu(args.device)
    if torch.distributed.is_initialized():
        report["group_backend"] = torch.distributed.get_backend()
    (folder / f"rank{rank}.json").write_text(json.dumps(report))
    return trainer


def attention_as_on_cpu(device: torch.device) -> bool:
    """Whether ``scaled_dot_product_attention`` on ``device`` equals the CPU's bit for bit.

    Its output and the gradients of its inputs.
    """
    generator = torch.Generator().manual_seed(1)
    inputs = [torch.randn(2, 2, 8, 8, generator=generator) for _ in range(3)]
    results = []
    for where in ("cpu", device):
        leaves = [tensor.detach().to(where).requires_grad_() for tensor in inputs]
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
        out.backward(torch.ones_like(out))
        results.append([out.detach().cpu(), *(leaf.grad.cpu() for leaf in leaves)])
    return all(torch.equal(cpu, found) for cpu, found in zip(*results, strict=True))


def whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def single() -> None:
    accelerator = bridge.Accelerator(ACCELERATOR)  # first: the arguments use its state
    train("float32")
    report = json.loads((OUT / "float32" / "rank0.json").read_text())
    # The bridge's object still holds the state it made (transformers' own arguments drop it).
    report["bridge_device"] = str(accelerator.device)
    report["bridge_state"] = str(accelerator.state.device)
    (OUT / "float32" / "rank0.json").write_text(json.dumps(report))
    # A second run in the process with another mixed precision: Accelerate keeps one
    # AcceleratorState per process, so that part goes; the process's device state stays.
    AcceleratorState._reset_state()
    GradientState._reset_state()
    train("bf16", bf16=True)


if __name__ == "__main__":
    if MODE == "single":
        single()
    elif MODE in ("fsdp", "fsdp1"):  # fsdp1: FSDP1, refused off CUDA
        version = 1 if MODE == "fsdp1" else 2
        config = {"version": version, "transformer_layer_cls_to_wrap": ["GPT2Block"]}
        train(MODE, fsdp="full_shard", fsdp_config=config)
    elif MODE == "sdpa":
        train(MODE, attention=None)
    else:
        train("processes")

    # As a careful script ends: a process group left to the interpreter's exit can abort the
    # process there (its backend's threads still running while its objects are destroyed).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()

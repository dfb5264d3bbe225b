"""The small models the ``kernels`` row is derived from, and how.

How: the operators their training steps call, recorded below autograd (:func:`record_operators`).

- :func:`small_cnn`: torchvision's ResNet in small (a convolution stem, batch norm, ReLU, max
  pooling, one basic block with its residual, adaptive average pooling, a linear head);
- :func:`small_gpt`: a GPT-2 block as transformers writes it (token and position embeddings,
  dropout, pre-norm LayerNorm, causal ``scaled_dot_product_attention`` from a fused QKV
  projection, a tanh-GELU MLP, a head tied to the embedding). Its attention's own dropout is 0,
  as in transformers' Llama family: with dropout, the device's draws differ from the CPU's and
  the attention's result can only be compared statistically.

Each is trained for a step (cross-entropy, backward, the optimizer's step) with AdamW's foreach
and fused implementations and SGD with momentum's foreach one, in float32 and under bfloat16
autocast. torchvision cannot be installed beside the CPU build of torch the project pins, so
the models are written here, after its and transformers' sources.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: The optimizers a step is recorded with: name -> (class name, keyword arguments).
OPTIMIZERS: dict[str, tuple[str, dict[str, Any]]] = {
    "adamw-foreach": ("AdamW", {"lr": 1e-3, "foreach": True}),
    "adamw-fused": ("AdamW", {"lr": 1e-3, "fused": True}),
    "sgd-foreach": ("SGD", {"lr": 0.1, "momentum": 0.9, "foreach": True}),
}
#: Sizes of the models' batches: images of :func:`small_cnn`, token sequences of
#: :func:`small_gpt`.
IMAGE, CLASSES = (3, 16, 16), 10
VOCABULARY, CONTEXT = 64, 16


def small_cnn(width: int = 8, classes: int = CLASSES) -> torch.nn.Module:
    """A ResNet in small: ``(N, 3, H, W)`` images to ``(N, classes)`` logits."""
    from torch import nn
    from torch.nn import functional as F

    class BasicBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = F.relu(self.bn1(self.conv1(x)))
            return F.relu(x + self.bn2(self.conv2(out)))

    return nn.Sequential(
        nn.Conv2d(IMAGE[0], width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        BasicBlock(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width, classes),
    )


def small_gpt(
    vocabulary: int = VOCABULARY, context: int = CONTEXT, width: int = 32, heads: int = 4
) -> torch.nn.Module:
    """Build a GPT-2 block with its embeddings and head.

    ``(N, T)`` token ids to ``(N, T, vocabulary)`` logits."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.dropout = nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, length, _ = x.shape
            q, k, v = (
                part.view(batch, length, heads, width // heads).transpose(1, 2)
                for part in self.qkv(x).split(width, dim=2)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            joined = y.transpose(1, 2).reshape(batch, length, width)
            out: torch.Tensor = self.dropout(self.proj(joined))
            return out

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocabulary, width)
            self.positions = nn.Embedding(context, width)
            self.dropout = nn.Dropout(0.1)
            self.ln1 = nn.LayerNorm(width)
            self.attention = SelfAttention()
            self.ln2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(
                nn.Linear(width, 4 * width),
                nn.GELU(approximate="tanh"),
                nn.Linear(4 * width, width),
                nn.Dropout(0.1),
            )
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocabulary, bias=False)
            self.head.weight = self.tokens.weight  # tied, as GPT-2's

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = self.dropout(self.tokens(ids) + self.positions(positions))
            x = x + self.attention(self.ln1(x))
            x = x + self.mlp(self.ln2(x))
            return self.head(self.ln_f(x))  # type: ignore[no-any-return]

    return GPT()


def batch(model: str, size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Return random inputs and targets for ``"cnn"`` or ``"gpt"``, on the CPU.

    See :func:`small_cnn` and :func:`small_gpt`."""
    import torch

    if model == "cnn":
        images = torch.randn(size, *IMAGE, generator=generator)
        return images, torch.randint(0, CLASSES, (size,), generator=generator)
    ids = torch.randint(0, VOCABULARY, (size, CONTEXT + 1), generator=generator)
    return ids[:, :-1], ids[:, 1:]  # the next token is the target


def optimizer(name: str, parameters: Any) -> torch.optim.Optimizer:
    """The optimizer :data:`OPTIMIZERS` calls ``name``."""
    import torch

    kind, options = OPTIMIZERS[name]
    made: torch.optim.Optimizer = getattr(torch.optim, kind)(parameters, **options)
    return made


def training_step(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    *,
    autocast: torch.dtype | None = None,
) -> torch.Tensor:
    """Take one training step as the Trainer takes it and return the loss.

    The forward and the loss (under autocast to ``autocast`` on the inputs' device, where given),
    backward, the optimizer's step; the loss."""
    import torch
    from torch.nn import functional as F

    kind = inputs.device.type
    with torch.autocast(kind, dtype=autocast or torch.float32, enabled=autocast is not None):
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return loss.detach()


def operator_name(op: Any, tensors: list[Any]) -> str:
    """Name an operator as torch's dispatcher does, with the dtype of its first float argument.

    ``aten::addmm[bfloat16]``. The dtype is that of its first floating-point tensor argument, where
    it has one (the bfloat16 kernels autocast needs are other kernels than the float32 ones)."""
    schema = op._schema
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    floating = next((t.dtype for t in tensors if t.is_floating_point()), None)
    return name if floating is None else f"{name}[{str(floating).removeprefix('torch.')}]"


@contextmanager
def record_operators() -> Iterator[list[str]]:
    """Record the operators called while the block runs, below autograd.

    Forward, backward and the optimizer's kernels, as :func:`operator_name` names them, in order of
    first call; torch's profiler markers (the ``profiler`` namespace) are left out."""
    import torch
    from torch.utils import _pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, None] = {}

    class Recording(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if not str(func._schema.name).startswith("profiler::"):
                leaves = _pytree.tree_leaves((args, kwargs or {}))
                tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
                seen.setdefault(operator_name(func, tensors))
            return func(*args, **(kwargs or {}))

    found: list[str] = []
    with Recording():  # type: ignore[no-untyped-call]
        yield found
    found.extend(seen)


def derive_needed_operators() -> tuple[str, ...]:
    """List the operators a training step of each model calls on the CPU.

    With each optimizer of :data:`OPTIMIZERS`, in float32 and under bfloat16 autocast: sorted, each
    once (what :data:`accelctl._kernels.cases.NEEDED_OPERATORS` holds)."""
    import torch

    needed: set[str] = set()
    makers: dict[str, Callable[[], torch.nn.Module]] = {"cnn": small_cnn, "gpt": small_gpt}
    for model_name, make in makers.items():
        for optimizer_name in OPTIMIZERS:
            for autocast in (None, torch.bfloat16):
                torch.manual_seed(0)
                model = make()
                inputs, targets = batch(model_name, 4, torch.Generator().manual_seed(0))
                stepper = optimizer(optimizer_name, model.parameters())
                with record_operators() as called:
                    training_step(model, inputs, targets, stepper, autocast=autocast)
                needed.update(called)
    return tuple(sorted(needed))

"""What the capability matrix's ``kernels`` row runs: one small case per layer or optimizer.

The cases are :data:`CASES`, each run on the device and on the CPU by :mod:`.probe`.

The list comes from the small models of :mod:`.reference`: every operator a training step of
them calls on the CPU (:data:`NEEDED_OPERATORS`, re-derived by a test) is called by some case,
with the dtype it has there (under bfloat16 autocast, the bfloat16 kernels). Beside those, the
layers common models use that the two lack: 1-d, 3-d and transposed convolution, GroupNorm.

A case is written with torch's functions (``F.conv2d``), not its operators, so that each device
routes it as it routes a model's call (the CPU's attention runs its flash kernel, a PrivateUse1
backend the overrideable one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .compare import difference
from .reference import OPTIMIZERS, optimizer

if TYPE_CHECKING:
    import torch

Phase = Literal["forward", "backward", "step"]

#: The operators every autocast policy (the CPU's, CUDA's) runs in the lower precision: under
#: bfloat16 autocast, a result of theirs in float32 is the device's autocast not casting them.
#: Others are compared by value alone: the policies differ in what they keep in float32
#: (CUDA's LayerNorm, the CPU's loss).
CAST_DOWN = ("aten::convolution", "aten::linear", "aten::scaled_dot_product_attention")


@dataclass(frozen=True)
class KernelCase:
    """One call (or an optimizer's steps) to run on the device and on the CPU and compare.

    ``make`` draws the CPU inputs from a seeded generator (those to differentiate with
    ``requires_grad``); ``run`` takes them and returns what is compared (a tensor, or a tuple
    whose first element's backward is taken). ``autocast``: both runs under bfloat16 autocast
    (see :data:`CAST_DOWN`). ``judge``: where the result is random (dropout), what checks it
    instead of the CPU's (on CPU copies: the inputs, the result, the gradients and the
    backward's seed; None for the forward alone), returning what is wrong or None.
    ``backward_alone``: the backward operator called on its own, to probe it where the forward
    is missing (the inputs and the seed).
    """

    name: str
    op: str
    make: Callable[[torch.Generator], tuple[torch.Tensor, ...]]
    run: Callable[..., Any]
    autocast: bool = False
    step: bool = False
    judge: Callable[..., str | None] | None = None
    backward_alone: Callable[..., Any] | None = None

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The passes it probes."""
        return ("step",) if self.step else ("forward", "backward")


def _draw(
    generator: torch.Generator, *shape: int, grad: bool = True, bf16: bool = False
) -> torch.Tensor:
    import torch

    value = torch.randn(*shape, generator=generator)
    if bf16:
        value = value.bfloat16()
    return value.requires_grad_(grad)


# -- convolution -----------------------------------------------------------------------------------


def _convolution(dims: int, transposed: bool = False, bf16: bool = False) -> KernelCase:
    """``conv{dims}d`` (or its transpose, stride 2) with a bias."""
    size = {1: (12,), 2: (8, 8), 3: (4, 6, 6)}[dims]
    channels_in, channels_out = 3, 4
    stride = 2 if transposed else 1

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        kernel = (3,) * dims
        shape = (channels_in, channels_out) if transposed else (channels_out, channels_in)
        return _draw(g, 2, channels_in, *size), _draw(g, *shape, *kernel), _draw(g, channels_out)

    def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional as F

        if transposed:
            return F.conv_transpose2d(x, weight, bias, stride=stride)
        function = getattr(F, f"conv{dims}d")
        out: torch.Tensor = function(x, weight, bias, stride=stride)
        return out

    def backward_alone(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, seed: torch.Tensor
    ) -> Any:
        import torch

        return torch.ops.aten.convolution_backward.default(
            seed, x, weight, [channels_out], [stride] * dims, [0] * dims, [1] * dims,
            transposed, [0] * dims, 1, [True, True, True],
        )  # fmt: skip

    name = "conv_transpose2d" if transposed else f"conv{dims}d"
    return KernelCase(
        name + ("-bf16" if bf16 else ""),
        "aten::convolution",
        make,
        run,
        autocast=bf16,
        backward_alone=backward_alone,
    )


# -- normalisation, activation, pooling ------------------------------------------------------------


def _batch_norm(bf16: bool = False) -> KernelCase:
    """The case of training-mode batch norm, as ``nn.BatchNorm2d`` runs it.

    The running statistics and the count of batches are updated (and compared)."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        import torch

        x = _draw(g, 4, 3, 5, 5, bf16=bf16)
        weight, bias = _draw(g, 3), _draw(g, 3)
        return x, weight, bias, torch.zeros(3), torch.ones(3), torch.zeros((), dtype=torch.long)

    def run(x: Any, weight: Any, bias: Any, mean: Any, var: Any, count: Any) -> Any:
        from torch.nn import functional as F

        count.add_(1)
        out = F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.1)
        return out, mean, var, count

    return KernelCase("batch_norm" + ("-bf16" if bf16 else ""), "aten::batch_norm", make, run,
                      autocast=bf16)  # fmt: skip


def _layer_norm() -> KernelCase:
    """The case of LayerNorm.

    No bfloat16 case: under autocast, the models' LayerNorms take the float32 residual stream
    and run in float32."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return _draw(g, 4, 6, 8), _draw(g, 8), _draw(g, 8)

    def run(x: Any, weight: Any, bias: Any) -> Any:
        from torch.nn import functional as F

        return F.layer_norm(x, (x.shape[-1],), weight, bias)

    return KernelCase("layer_norm", "aten::layer_norm", make, run)


def _group_norm() -> KernelCase:
    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return _draw(g, 4, 6, 5, 5), _draw(g, 6), _draw(g, 6)

    def run(x: Any, weight: Any, bias: Any) -> Any:
        from torch.nn import functional as F

        return F.group_norm(x, 3, weight, bias)

    return KernelCase("group_norm", "aten::group_norm", make, run)


def _residual_relu(bf16: bool = False) -> KernelCase:
    """A residual sum and ReLU, as a ResNet block ends."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return _draw(g, 4, 8, bf16=bf16), _draw(g, 4, 8, bf16=bf16)

    def run(x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        return F.relu(x + y)

    return KernelCase("relu" + ("-bf16" if bf16 else ""), "aten::relu", make, run, autocast=bf16)


def _gelu(bf16: bool = False) -> KernelCase:
    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (_draw(g, 4, 8, bf16=bf16),)

    def run(x: Any) -> Any:
        from torch.nn import functional as F

        return F.gelu(x, approximate="tanh")  # GPT-2's

    return KernelCase("gelu" + ("-bf16" if bf16 else ""), "aten::gelu", make, run, autocast=bf16)


def _max_pool(bf16: bool = False) -> KernelCase:
    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (_draw(g, 2, 3, 8, 8, bf16=bf16),)

    def run(x: Any) -> Any:
        from torch.nn import functional as F

        return F.max_pool2d(x, 2)

    return KernelCase("max_pool2d" + ("-bf16" if bf16 else ""), "aten::max_pool2d", make, run,
                      autocast=bf16)  # fmt: skip


def _average_pool(bf16: bool = False) -> KernelCase:
    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (_draw(g, 2, 3, 6, 6, bf16=bf16),)

    def run(x: Any) -> Any:
        from torch.nn import functional as F

        return F.adaptive_avg_pool2d(x, 1)

    return KernelCase("adaptive_avg_pool2d" + ("-bf16" if bf16 else ""),
                      "aten::adaptive_avg_pool2d", make, run, autocast=bf16)  # fmt: skip


def _dropout(bf16: bool = False, p: float = 0.1) -> KernelCase:
    """The case of dropout as GPT-2's, judged by its shape.

    Judged by its shape, not against the CPU's draws (each output is 0 or the input scaled by
    ``1/(1-p)``, about ``p`` of them 0; the gradient is the seed through the same mask)."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (_draw(g, 4096, bf16=bf16),)

    def run(x: Any) -> Any:
        from torch.nn import functional as F

        return F.dropout(x, p, training=True)

    def judge(inputs: Any, out: Any, grads: Any = None, seed: Any = None) -> str | None:
        (x,) = inputs
        kept = out != 0
        scaled = difference(out[kept], x.detach()[kept] / (1 - p))
        if scaled is not None:
            return f"the kept values are not the input scaled by 1/(1-p): {scaled}"
        dropped = 1 - float(kept.float().mean())
        if abs(dropped - p) > 0.05:  # 4096 draws: p's standard error is under 0.005
            return f"dropped {dropped:.3f} of the values, where p is {p}"
        if grads is None:
            return None
        expected = (seed * kept) / (1 - p)
        wrong = difference(grads[0], expected.to(grads[0].dtype))
        return None if wrong is None else f"the gradient is not the seed through the mask: {wrong}"

    return KernelCase("dropout" + ("-bf16" if bf16 else ""), "aten::dropout", make, run,
                      autocast=bf16, judge=judge)  # fmt: skip


# -- the linear layer, embeddings, attention, the loss ---------------------------------------------


def _linear(bf16: bool = False) -> KernelCase:
    """The case of linear layers on a batch of sequences, as a transformer's.

    One with a bias, then a head without (as GPT-2's tied one); both results are compared (an
    autocast may cast one kind and not the other: torch_openreg 0.0.1 leaves the one with a bias in
    float32)."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return _draw(g, 2, 4, 8), _draw(g, 5, 8), _draw(g, 5), _draw(g, 6, 5)

    def run(x: Any, weight: Any, bias: Any, head: Any) -> Any:
        from torch.nn import functional as F

        hidden = F.linear(x, weight, bias)
        return F.linear(hidden, head), hidden

    return KernelCase("linear" + ("-bf16" if bf16 else ""), "aten::linear", make, run,
                      autocast=bf16)  # fmt: skip


def _embedding() -> KernelCase:
    """Token and position embeddings, summed, as GPT-2's input."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        import torch

        ids = torch.randint(0, 16, (2, 7), generator=g)[:, :-1]  # a shifted batch's inputs
        return ids, _draw(g, 16, 8), _draw(g, 6, 8)

    def run(ids: Any, tokens: Any, positions: Any) -> Any:
        import torch
        from torch.nn import functional as F

        where = torch.arange(ids.shape[1], device=ids.device)
        return F.embedding(ids, tokens) + F.embedding(where, positions)

    return KernelCase("embedding", "aten::embedding", make, run)


def _attention(bf16: bool = False) -> KernelCase:
    """The case of causal self-attention as GPT-2's.

    A fused QKV projection split into heads, ``scaled_dot_product_attention``, the heads joined
    again."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return _draw(g, 2, 6, 16), _draw(g, 48, 16), _draw(g, 48)

    def run(x: Any, weight: Any, bias: Any) -> Any:
        from torch.nn import functional as F

        batch, length, width = x.shape
        q, k, v = (
            part.view(batch, length, 2, width // 2).transpose(1, 2)
            for part in F.linear(x, weight, bias).split(width, dim=2)  # type: ignore[no-untyped-call]
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(batch, length, width)

    return KernelCase("scaled_dot_product_attention" + ("-bf16" if bf16 else ""),
                      "aten::scaled_dot_product_attention", make, run, autocast=bf16)  # fmt: skip


def _cross_entropy(bf16: bool = False) -> KernelCase:
    """The case of a classifier's and a language model's losses, summed.

    The classifier's takes logits and labels; the language model's logits and next-token
    targets, flattened."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        import torch

        labels = torch.randint(0, 10, (4,), generator=g)
        ids = torch.randint(0, 10, (2, 4), generator=g)
        return _draw(g, 4, 10, bf16=bf16), labels, _draw(g, 2, 3, 10, bf16=bf16), ids

    def run(logits: Any, labels: Any, sequences: Any, ids: Any) -> Any:
        from torch.nn import functional as F

        targets = ids[:, 1:]  # not contiguous, as a shifted batch is
        classifier = F.cross_entropy(logits, labels.reshape(-1))
        flat = sequences.reshape(-1, sequences.shape[-1])
        return classifier + F.cross_entropy(flat, targets.reshape(-1))

    return KernelCase("cross_entropy" + ("-bf16" if bf16 else ""), "aten::cross_entropy", make,
                      run, autocast=bf16)  # fmt: skip


# -- optimizer steps -------------------------------------------------------------------------------


def _optimizer(name: str) -> KernelCase:
    """The case of two steps of one of :data:`.reference.OPTIMIZERS` on three parameters.

    The second step reads the state the first made."""

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        shapes = ((4, 8), (8,), (3, 4, 2))
        params = tuple(_draw(g, *shape, grad=False) for shape in shapes)
        return params + tuple(_draw(g, *shape, grad=False) for shape in shapes)

    def run(*tensors: Any) -> Any:
        params, grads = tensors[:3], tensors[3:]
        stepper = optimizer(name, params)
        for _ in range(2):
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad.clone()
            stepper.step()
        return params

    kind, options = OPTIMIZERS[name]
    how = "fused" if options.get("fused") else "foreach"
    return KernelCase(name, f"torch.optim.{kind}({how}=True)", make, run, step=True)


#: Every case of the ``kernels`` row, in the order they run and are reported.
CASES: tuple[KernelCase, ...] = (
    _convolution(1),
    _convolution(2),
    _convolution(3),
    _convolution(2, transposed=True),
    _batch_norm(),
    _layer_norm(),
    _group_norm(),
    _residual_relu(),
    _gelu(),
    _max_pool(),
    _average_pool(),
    _dropout(),
    _linear(),
    _embedding(),
    _attention(),
    _cross_entropy(),
    _optimizer("adamw-foreach"),
    _optimizer("adamw-fused"),
    _optimizer("sgd-foreach"),
    _convolution(2, bf16=True),
    _batch_norm(bf16=True),
    _residual_relu(bf16=True),
    _gelu(bf16=True),
    _max_pool(bf16=True),
    _average_pool(bf16=True),
    _dropout(bf16=True),
    _linear(bf16=True),
    _attention(bf16=True),
    _cross_entropy(bf16=True),
)

#: The operators a training step of :mod:`.reference`'s models calls on the CPU
#: (:func:`.reference.derive_needed_operators`), each called by some case of :data:`CASES`.
NEEDED_OPERATORS: tuple[str, ...] = (
    "aten::_foreach_add_.List[float32]",
    "aten::_foreach_add_.Scalar[float32]",
    "aten::_foreach_add_.Tensor[float32]",
    "aten::_foreach_addcdiv_.ScalarList[float32]",
    "aten::_foreach_addcmul_.Scalar[float32]",
    "aten::_foreach_div_.ScalarList[float32]",
    "aten::_foreach_lerp_.Scalar[float32]",
    "aten::_foreach_mul_.Scalar[float32]",
    "aten::_foreach_sqrt[float32]",
    "aten::_fused_adamw_[float32]",
    "aten::_local_scalar_dense[float32]",
    "aten::_log_softmax[float32]",
    "aten::_log_softmax_backward_data[float32]",
    "aten::_scaled_dot_product_flash_attention_for_cpu[bfloat16]",
    "aten::_scaled_dot_product_flash_attention_for_cpu[float32]",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward[bfloat16]",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward[float32]",
    "aten::_to_copy[bfloat16]",
    "aten::_to_copy[float32]",
    "aten::_unsafe_view",
    "aten::_unsafe_view[bfloat16]",
    "aten::_unsafe_view[float32]",
    "aten::add.Tensor[bfloat16]",
    "aten::add.Tensor[float32]",
    "aten::add_.Tensor",
    "aten::addmm[bfloat16]",
    "aten::addmm[float32]",
    "aten::arange",
    "aten::bernoulli_.float[bfloat16]",
    "aten::bernoulli_.float[float32]",
    "aten::cat[bfloat16]",
    "aten::cat[float32]",
    "aten::clone",
    "aten::clone[float32]",
    "aten::convolution[bfloat16]",
    "aten::convolution[float32]",
    "aten::convolution_backward[bfloat16]",
    "aten::convolution_backward[float32]",
    "aten::detach[bfloat16]",
    "aten::detach[float32]",
    "aten::div.Scalar[bfloat16]",
    "aten::div.Scalar[float32]",
    "aten::div_.Scalar[bfloat16]",
    "aten::div_.Scalar[float32]",
    "aten::embedding[float32]",
    "aten::embedding_dense_backward[float32]",
    "aten::empty.memory_format",
    "aten::empty_like[bfloat16]",
    "aten::empty_like[float32]",
    "aten::expand[bfloat16]",
    "aten::expand[float32]",
    "aten::gelu[bfloat16]",
    "aten::gelu[float32]",
    "aten::gelu_backward[bfloat16]",
    "aten::gelu_backward[float32]",
    "aten::lift_fresh[float32]",
    "aten::max_pool2d_with_indices[bfloat16]",
    "aten::max_pool2d_with_indices[float32]",
    "aten::max_pool2d_with_indices_backward[bfloat16]",
    "aten::max_pool2d_with_indices_backward[float32]",
    "aten::mean.dim[bfloat16]",
    "aten::mean.dim[float32]",
    "aten::mm[bfloat16]",
    "aten::mm[float32]",
    "aten::mul.Tensor[bfloat16]",
    "aten::mul.Tensor[float32]",
    "aten::native_batch_norm[bfloat16]",
    "aten::native_batch_norm[float32]",
    "aten::native_batch_norm_backward[bfloat16]",
    "aten::native_batch_norm_backward[float32]",
    "aten::native_layer_norm[float32]",
    "aten::native_layer_norm_backward[float32]",
    "aten::nll_loss_backward[float32]",
    "aten::nll_loss_forward[float32]",
    "aten::ones_like[float32]",
    "aten::relu[bfloat16]",
    "aten::relu[float32]",
    "aten::split.Tensor[bfloat16]",
    "aten::split.Tensor[float32]",
    "aten::sum.dim_IntList[bfloat16]",
    "aten::sum.dim_IntList[float32]",
    "aten::t[bfloat16]",
    "aten::t[float32]",
    "aten::threshold_backward[bfloat16]",
    "aten::threshold_backward[float32]",
    "aten::transpose.int[bfloat16]",
    "aten::transpose.int[float32]",
    "aten::view",
    "aten::view[bfloat16]",
    "aten::view[float32]",
    "aten::zeros",
    "aten::zeros_like[float32]",
)

"""The ``kernels`` row's list cannot drift from what the small models call.

``NEEDED_OPERATORS`` is what a training step of the small CNN and GPT-2 block calls on the CPU today
(re-derived here), and every one of those operators, with its dtype, is called by some case as the
probe runs it.
"""

from __future__ import annotations

import torch

from accelctl._kernels.cases import CASES, NEEDED_OPERATORS
from accelctl._kernels.probe import forward, weighted_loss
from accelctl._kernels.reference import derive_needed_operators, record_operators


def test_the_needed_operators_are_what_the_small_models_call() -> None:
    """``NEEDED_OPERATORS`` is what the small models call on the CPU today.

    Where this fails, torch or the models changed: paste the new list into
    ``accelctl/_kernels/cases.py`` and give the cases what they lack (the next test).
    """
    assert derive_needed_operators() == NEEDED_OPERATORS


def test_every_needed_operator_is_called_by_a_case() -> None:
    called: set[str] = set()
    for case in CASES:
        generator = torch.Generator().manual_seed(0)
        inputs = case.make(generator)
        result = forward(case, inputs, "cpu")
        seed = None
        if not case.step:
            first = result[0] if isinstance(result, tuple) else result
            seed = torch.randn(first.shape, generator=generator).to(first.dtype)
        inputs = case.make(torch.Generator().manual_seed(0))  # fresh leaves for the recording
        with record_operators() as ops:
            result = forward(case, inputs, "cpu")
            if seed is not None:
                weighted_loss(result, seed).backward()
        called.update(ops)
    assert sorted(set(NEEDED_OPERATORS) - called) == []


def test_the_list_has_what_autocast_to_bfloat16_needs() -> None:
    bf16 = {name.split("[")[0] for name in NEEDED_OPERATORS if name.endswith("[bfloat16]")}
    assert {"aten::convolution", "aten::convolution_backward", "aten::addmm", "aten::mm",
            "aten::native_batch_norm", "aten::_to_copy"} <= bf16  # fmt: skip


def test_the_cases_cover_the_layers_the_models_lack() -> None:
    """The cases cover layers the two models lack, the optimizers and bfloat16 autocast.

    1-d, 3-d and transposed convolution and GroupNorm, each with its backward; the optimizers'
    steps; bfloat16 autocast variants.
    """
    names = [case.name for case in CASES]
    assert {"conv1d", "conv2d", "conv3d", "conv_transpose2d", "group_norm"} <= set(names)
    assert {"adamw-foreach", "adamw-fused", "sgd-foreach"} <= set(names)
    assert [case.phases for case in CASES if case.name == "conv3d"] == [("forward", "backward")]
    assert [case.phases for case in CASES if case.step] == [("step",)] * 3
    assert all(case.autocast == case.name.endswith("-bf16") for case in CASES)
    assert len(names) == len(set(names))

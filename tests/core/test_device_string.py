"""``accelctl.split_device``: a device as a torch.device or as its string, split without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import accelctl
from accelctl._base.device_string import device_string


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("cuda:1", ("cuda", 1)),
        (" openreg:0 ", ("openreg", 0)),
        ("cpu", ("cpu", None)),
        (torch.device("cuda", 1), ("cuda", 1)),
        (torch.device("cpu"), ("cpu", None)),
        (torch.device("meta", 3), ("meta", 3)),
    ],
)
def test_both_forms_split_alike(device: object, expected: tuple[str, int | None]) -> None:
    assert accelctl.split_device(device) == expected


def test_device_string_is_what_torch_prints() -> None:
    assert device_string("cuda", 0) == str(torch.device("cuda", 0))
    assert device_string("cpu") == str(torch.device("cpu"))


@pytest.mark.parametrize("device", ["", "cuda:", "cuda:-1", "CUDA:0", "cuda:0:1", "0", "cuda 0"])
def test_bad_strings_say_what_is_accepted(device: str) -> None:
    with pytest.raises(
        ValueError, match=r"is not a device name; expected a torch\.device, or a str"
    ):
        accelctl.split_device(device)


@pytest.mark.parametrize("device", [0, None, ("cuda", 0)])
def test_other_types_are_a_type_error(device: object) -> None:
    with pytest.raises(TypeError, match=r"device must be a torch\.device, or a str"):
        accelctl.split_device(device)


def test_splitting_a_string_imports_no_torch() -> None:
    code = "import sys, accelctl; print(accelctl.split_device('xpu:2'), 'torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split() == ["('xpu',", "2)", "False"]

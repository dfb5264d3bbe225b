"""``accelctl.torch_build``: torch's version and builds read from ``torch/version.py`` as text."""

from __future__ import annotations

from pathlib import Path

import torch

from accelctl import torch_build
from accelctl.torch_build import TorchBuild


def test_the_installed_file_gives_what_torch_says() -> None:
    folder = Path(torch.__file__).parent
    found = torch_build.version_literals(folder / "version.py")
    assert found is not None
    assert (found["__version__"], found.get("cuda"), found.get("hip")) == (
        torch.__version__,
        torch.version.cuda,
        torch.version.hip,
    )


def test_a_computed_file_is_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text("import os\n__version__ = os.environ['V']\n")
    assert torch_build.version_literals(tmp_path / "version.py") is None
    (tmp_path / "version.py").write_text("cuda = '12.8'\n")  # no version: not the generated file
    assert torch_build.version_literals(tmp_path / "version.py") is None


def test_mps_and_cudnn_without_an_import(monkeypatch) -> None:
    monkeypatch.setattr(torch_build.sys, "platform", "linux")
    cpu = TorchBuild(version="2.13.0+cpu", path="/x")
    assert torch_build.mps_built(cpu) is False
    assert torch_build.cudnn_version(cpu) is None
    cuda = TorchBuild(version="2.13.0+cu128", path="/x", cuda="12.8")
    # Read from the nvidia-cudnn-cu12 wheel's metadata where installed; None here otherwise.
    from importlib import metadata

    try:
        expected: str | None = metadata.version("nvidia-cudnn-cu12")
    except metadata.PackageNotFoundError:
        expected = None
    assert torch_build.cudnn_version(cuda) == expected

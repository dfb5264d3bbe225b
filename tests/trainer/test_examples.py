"""The examples train for real (a few epochs, on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cv_example_learns_the_digits_on_the_cpu(tmp_path: Path) -> None:
    command = [sys.executable, str(EXAMPLES / "cv_example.py"), "--cpu", "--epochs", "3"]
    proc = subprocess.run(
        [*command, "--root-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: three epochs take seconds, a minute on a loaded machine
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "training on scikit-learn digits: cpu (cpu), precision 32" in out
    # Each epoch said once: the Trainer's line (issue 46, item 5), not the example's too.
    lines = (out + proc.stderr).splitlines()
    said = [line for line in lines if re.match(r"(accelctl: )?epoch \d", line)]
    assert [line.split(" (step")[0] for line in said] == [
        "accelctl: epoch 1/3",
        "accelctl: epoch 2/3",
        "accelctl: epoch 3/3",
    ], said
    assert all("val_accuracy" in line and "samples/s" in line for line in said)
    accuracy = re.search(r"final accuracy ([0-9.]+)%", out)
    assert accuracy is not None, out
    assert float(accuracy.group(1)) > 85  # ten classes: chance is 10%
    assert " s (wall time" in out
    epochs = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in epochs if line["kind"] == "epoch"] == [0, 1, 2]


def test_cv_example_synthetic_images_are_learnable_patterns() -> None:
    cv = load_example("cv_example")
    train, test = cv.synthetic(200, seed=0, size=16)
    images, labels = train.tensors
    assert images.shape == (160, 3, 16, 16) and len(test) == 40
    # Images of one class are nearer their own class's mean than another's, most of the time.
    means = torch.stack([images[labels == c].mean(0) for c in range(10)])
    nearest = torch.cdist(images.flatten(1), means.flatten(1)).argmin(1)
    assert (nearest == labels).float().mean() > 0.9


def test_cv_example_refuses_cpu_with_another_accelerator() -> None:
    cv = load_example("cv_example")
    with pytest.raises(SystemExit):
        cv.parse_args(["--cpu", "--accelerator", "cuda"])


@pytest.mark.slow
def test_custom_accelerator_example_trains_with_an_instance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load_example("custom_accelerator")
    metrics = example.main(epochs=5, root_dir=str(tmp_path))
    y = example.data(512, seed=2).tensors[1]
    assert metrics["val_mse"] < 0.2 * float(y.var())  # far better than predicting the mean
    out = capsys.readouterr().out
    assert "trained on 'cpu-custom' (1 process(es), device cpu)" in out
    assert "hooks called on this process: setup_device(cpu), teardown()" in out

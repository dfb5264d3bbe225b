"""A device that lacks kernels stops with one line, or runs them on the CPU with the fallback.

torch_openreg 0.0.3: no convolution, placeholder attention kernels. It stops with accelctl's one
line, or, with ``ACCELCTL_CPU_FALLBACK=1``, runs the missing kernels on the CPU and ends with the
CPU run's weights, in one process and under ``accelctl launch`` on its two devices.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openregmachine import UserMachine, succeeded

pytestmark = [pytest.mark.openreg, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("kernels_run.py")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cv_example.py"
FALLBACK = {"ACCELCTL_CPU_FALLBACK": "1"}


def run(machine: UserMachine, model: str, accelerator: str, out: Path, **env: str) -> Any:
    done = machine.run(sys.executable, str(SCRIPT), model, accelerator, str(out), **env)
    return done


def result(out: Path, rank: int = 0) -> dict[str, Any]:
    return json.loads((out / f"{rank}.json").read_text())


@pytest.fixture(scope="module")
def cpu_run(
    occl_machine: UserMachine, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], dict[str, Any]]:
    """``cpu_run(model)``: the model's run on the CPU, made once for the module's tests.

    What a run with the fallback must end with (the CPU's kernels are torch's, whichever
    torch_openreg wheel is installed beside it).
    """
    made: dict[str, dict[str, Any]] = {}

    def get(model: str) -> dict[str, Any]:
        if model not in made:
            out = tmp_path_factory.mktemp(f"cpu-{model}")
            succeeded(run(occl_machine, model, "cpu", out))
            made[model] = result(out)
        return made[model]

    return get


def stopped_with_one_line(done: Any) -> str:
    """The one line of accelctl a missing kernel ends a script with: exit 1, no traceback."""
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "has no kernel for" in line]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "stopped by an error" not in done.stderr  # the error says it all
    return lines[0]


def test_cv_example_stops_at_once_with_one_line_naming_the_convolution(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    command = [sys.executable, str(EXAMPLE), "--epochs", "1", "--root-dir", str(tmp_path)]
    line = stopped_with_one_line(occl_machine.run(*command))
    assert line.startswith("accelctl: aten::convolution has no kernel for openreg:0 ")
    assert "(plugin privateuse1), called by Conv2d at features.0:" in line
    # The ways out as the command line the user ran, with a variable before it.
    shown = " ".join(command)
    assert f"to train on the CPU, ACCELCTL_ACCELERATOR=cpu {shown};" in line
    assert f"the CPU, ACCELCTL_CPU_FALLBACK=1 {shown} (ACCELCTL_DEBUG=1" in line


def learned(done: Any) -> list[tuple[str, dict[str, str]]]:
    """Return each epoch's figures but the timings, and the final accuracy the example prints.

    The figures come from the Trainer's line (``accelctl: epoch 1/2 (step 23): train_loss 1.784,
    flops_per_second ..., 123.5 samples/s``).
    """
    kept = ("train_loss", "val_loss", "val_accuracy")
    epochs = []
    for line in done.stderr.splitlines():
        if line.startswith("accelctl: epoch "):
            _, where, figures = line.split(": ", 2)
            pairs = (part.rsplit(" ", 1) for part in figures.split(", "))
            epochs.append((where, {key: value for key, value in pairs if key in kept}))
    final = [line.split(" in ")[0] for line in done.stdout.splitlines() if line.startswith("final")]
    return [*epochs, ("final", {"accuracy": final[0]})]


PAGE = Path(__file__).resolve().parents[2] / "docs" / "missing-kernels.md"


def test_the_pages_command_prints_the_pages_line(occl_machine: UserMachine) -> None:
    """docs/missing-kernels.md's first command, run as the page shows it, prints the page's line.

    From the clone's root, ``python`` on the PATH.
    """
    text = PAGE.read_text()
    command = re.search(r"```console\n\$ (python examples/cv_example.py)\n```", text)
    shown = re.search(r"```text\n(accelctl: aten::convolution[^\n]*)\n```", text)
    assert command is not None and shown is not None
    root = EXAMPLE.parents[1]
    with tempfile.TemporaryDirectory() as folder:  # the example writes into its working folder
        done = occl_machine.run(
            "python", str(root / "examples" / "cv_example.py"), cwd=Path(folder)
        )
    line = stopped_with_one_line(done)
    assert line == shown.group(1).replace(
        "examples/cv_example.py", str(root / "examples" / "cv_example.py")
    )


def test_the_debug_switch_shows_the_traceback_too(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    done = run(occl_machine, "cnn", "openreg", tmp_path, ACCELCTL_DEBUG="1")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "convolution_overrideable not implemented" in done.stderr
    assert "accelctl.MissingKernelError: aten::convolution has no kernel" in done.stderr


def test_cv_example_with_the_fallback_learns_as_on_the_cpu(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    def example(root: Path, *extra: str, **env: str) -> Any:
        command = [sys.executable, str(EXAMPLE), "--epochs", "2", "--root-dir", str(root)]
        return succeeded(occl_machine.run(*command, *extra, **env))

    on_openreg = example(tmp_path / "openreg", **FALLBACK)
    on_cpu = example(tmp_path / "cpu", "--cpu")
    assert "openreg (openreg:0)" in on_openreg.stdout
    # The same accuracy, losses and final line: the CPU's kernels, forward and backward.
    assert learned(on_openreg) == learned(on_cpu)
    warnings = [line for line in on_openreg.stderr.splitlines() if "CPUFallbackWarning" in line]
    assert len(warnings) == 1, on_openreg.stderr  # named once, forward and backward alike
    assert "aten::convolution has no kernel for openreg:0: it runs on the CPU" in warnings[0]
    assert "cv_example.py" in warnings[0]  # pointed at the user's line, not torch's
    epochs = [
        json.loads(line)
        for line in (tmp_path / "openreg" / "metrics.jsonl").read_text().splitlines()
        if '"epoch"' in line and '"kind": "epoch"' in line
    ]
    calls = [line["cpu_fallback_calls"] for line in epochs]
    assert calls[0] > 0 and calls[1] > calls[0]  # the cost, visible and growing


def test_a_cnn_with_the_fallback_ends_with_the_cpus_weights(
    occl_machine: UserMachine, cpu_run: Callable[[str], dict[str, Any]], tmp_path: Path
) -> None:
    succeeded(run(occl_machine, "cnn", "openreg", tmp_path / "openreg", **FALLBACK))
    openreg, cpu = result(tmp_path / "openreg"), cpu_run("cnn")
    assert openreg["device"] == "openreg:0"
    assert openreg["weights"] == cpu["weights"]
    assert openreg["metrics"]["train_loss"] == cpu["metrics"]["train_loss"]
    # 4 batches x 2 epochs, each a forward and a backward of 2 convolutions.
    assert openreg["metrics"]["cpu_fallback_calls"] == 4 * 2 * 2 * 2
    assert cpu["fallback_calls"] == [None] * len(cpu["fallback_calls"])


def test_attention_stops_at_its_first_call_without_the_fallback(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    line = stopped_with_one_line(run(occl_machine, "attention", "openreg", tmp_path))
    assert "aten::scaled_dot_product_attention has no kernel for openreg:0" in line
    assert "called by Attention at blocks.0:" in line
    assert "ACCELCTL_CPU_FALLBACK=1" in line


def test_attention_with_the_fallback_ends_with_the_cpus_weights(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    succeeded(run(occl_machine, "attention", "openreg", tmp_path / "openreg", **FALLBACK))
    succeeded(run(occl_machine, "attention", "cpu", tmp_path / "cpu"))
    assert result(tmp_path / "openreg")["weights"] == result(tmp_path / "cpu")["weights"]


def test_a_kernel_the_cpu_lacks_too_says_the_fallback_cannot_run_it(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    for env in ({}, FALLBACK):
        line = stopped_with_one_line(run(occl_machine, "lstm", "openreg", tmp_path, **env))
        assert "aten::_thnn_fused_lstm_cell has no kernel for openreg:0" in line
        assert "called by LSTM at rnn" in line
        assert "cannot run it: the CPU has no such kernel either" in line
        assert "to run the kernels the device lacks" not in line


def test_launch_on_two_devices_says_it_once_then_trains_with_the_fallback(
    occl_machine: UserMachine, tmp_path: Path
) -> None:
    command = ("launch", "--devices", "2", str(SCRIPT), "cnn", "auto")
    done = occl_machine.accelctl(*command, str(tmp_path / "stopped"))
    line = stopped_with_one_line(done)
    assert line.startswith("accelctl launch: aten::convolution has no kernel for openreg:")
    assert f"accelctl launch --cpu --devices 2 {SCRIPT} cnn auto" in line
    assert "ACCELCTL_CPU_FALLBACK=1 accelctl launch --accelerator openreg --devices 2" in line

    succeeded(occl_machine.accelctl(*command, str(tmp_path / "fallback"), **FALLBACK))
    succeeded(occl_machine.accelctl(*command[:-1], "cpu", str(tmp_path / "cpu")))
    ranks = [result(tmp_path / "fallback", rank) for rank in (0, 1)]
    assert [r["device"] for r in ranks] == ["openreg:0", "openreg:1"]
    assert ranks[0]["weights"] == ranks[1]["weights"] == result(tmp_path / "cpu")["weights"]


#: A plugin for openreg that declares operators missing which the backend has (so the tests
#: see accelctl's own kernels run in their place), one of them never to fall back.
DECLARING = """
import json, sys, warnings
import torch, accelctl
from accelctl._kernels.setup import _FALLBACKS, fallback_calls, set_up_kernels

class Declaring(accelctl.Accelerator):
    name = "declaring"
    device_type = "openreg"
    def detect(self): return True
    def auto_device_count(self): return 2
    def kernel_gaps(self):
        return {"missing": ["aten::add_.Tensor", "aten::mul.out", "aten::sub.Tensor",
                            "aten::transpose.int"],
                "never_fall_back": ["aten::sub.Tensor"]}

handle = accelctl.AcceleratorHandle.from_object(Declaring())
device = torch.device("openreg", 1)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    setup = set_up_kernels(handle, device)
    base = torch.arange(8.0, device=device)
    view = base[2:5]
    returned = view.add_(torch.ones(3, device=device))   # in place, into a view
    out = torch.empty(3, device=device)
    given = torch.mul(torch.full((3,), 2.0, device=device), 3.0 * torch.ones(3, device=device),
                      out=out)
    again = torch.ones(2, device=device).add_(1)
    try:
        torch.ones(2, device=device) - torch.ones(2, device=device)
        refused = None
    except accelctl.MissingKernelError as error:
        refused = error.parts()
transposed = torch.ones(2, 3, device=device).t()  # a view: never run on copies
print(json.dumps({
    "fallback": setup.fallback,
    "base": base.cpu().tolist(), "base_device": str(base.device),
    "same_view": returned is view, "same_out": given is out, "out": out.cpu().tolist(),
    "out_device": str(out.device), "again": again.cpu().tolist(),
    "refused": refused, "calls": fallback_calls("openreg"),
    "by_op": dict(_FALLBACKS["openreg"].calls),
    "warned": [str(w.message) for w in seen if w.category is accelctl.CPUFallbackWarning],
    "transposed_is_view": transposed._base is not None,
}))
"""


def test_declared_operators_run_on_the_cpu_writing_into_the_callers_tensors(
    occl_machine: UserMachine,
) -> None:
    seen = occl_machine.python(DECLARING, **FALLBACK)
    assert seen["fallback"] == "accelctl"
    # add_ on a view wrote through into the base, on the device; the view itself came back.
    assert seen["base"] == [0.0, 1.0, 3.0, 4.0, 5.0, 5.0, 6.0, 7.0]
    assert seen["base_device"] == "openreg:1" and seen["same_view"]
    # out= filled the caller's tensor and returned it.
    assert seen["same_out"] and seen["out"] == [6.0, 6.0, 6.0] and seen["out_device"] == "openreg:1"
    assert seen["again"] == [2.0, 2.0]
    # Every call counted: the two add_, and mul.out (also behind torch's own `3.0 * tensor`
    # for a backend without a kernel for mul's functional form).
    assert seen["by_op"]["aten::add_.Tensor"] == 2 and seen["by_op"]["aten::mul.out"] >= 1
    assert seen["calls"] == sum(seen["by_op"].values())
    assert sorted(m.split(" has no kernel")[0] for m in seen["warned"]) == [
        "aten::add_.Tensor",
        "aten::mul.out",
    ]
    # Never to fall back: still missing, and the error says why.
    assert seen["refused"]["op"] == "aten::sub.Tensor"
    assert seen["refused"]["fallback"] == (
        "the plugin declaring declares that aten::sub.Tensor must never run there"
    )
    assert seen["transposed_is_view"]  # a view operator is never replaced by copies


UNDEFINED_GRADIENT = """
import json, torch
from accelctl._kernels.translate import missing_kernel_error
q = torch.randn(1, 2, 4, 8, device="openreg", requires_grad=True)
loss = torch.nn.functional.scaled_dot_product_attention(q, q, q).sum()
try:
    loss.backward()
except RuntimeError as exc:
    raw = str(exc)
    error = missing_kernel_error(exc, accelerator="privateuse1", device=q.device, loss=loss)
print(json.dumps({"raw": raw, "parts": error.parts() if error else None}))
"""


def test_the_engines_undefined_gradient_error_is_named_from_the_loss_graph(
    occl_machine: UserMachine,
) -> None:
    seen = occl_machine.python(UNDEFINED_GRADIENT)
    assert seen["raw"] == "tensor does not have a device"  # torch names no operator
    parts = seen["parts"]
    assert parts["op"] == "aten::scaled_dot_product_attention"
    assert parts["kernel"] == "aten::_scaled_dot_product_fused_attention_overrideable_backward"
    assert parts["phase"] == "backward"


@pytest.mark.parametrize("version", ["0.0.1", "0.0.2"])
def test_older_wheels_lack_the_same_convolution_and_the_fallback_runs_it(
    version: str,
    request: pytest.FixtureRequest,
    cpu_run: Callable[[str], dict[str, Any]],
    tmp_path: Path,
) -> None:
    machine = request.getfixturevalue(
        "no_backend_machine" if version == "0.0.1" else "fsdp_gaps_machine"
    )
    line = stopped_with_one_line(run(machine, "cnn", "openreg", tmp_path / "stopped"))
    assert "aten::convolution has no kernel for openreg:0" in line
    succeeded(run(machine, "cnn", "openreg", tmp_path / "fallback", **FALLBACK))
    assert result(tmp_path / "fallback")["weights"] == cpu_run("cnn")["weights"]

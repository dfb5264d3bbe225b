"""Real-GPU checks of the CUDA plugin (marked ``cuda``; skipped without a visible GPU).

Run them with ``tests/gpu/run_gpu_checks.sh`` on a GPU machine. Each check that must see a fresh
process (fork safety, tensor work) runs in a subprocess, so the order of the tests does not
matter and this pytest process never creates a CUDA context itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from accelctl.cli import cli


def _driver_gpus() -> int:
    """Count the GPUs the NVIDIA driver itself reports, independently of the code under test.

    A probe that wrongly said 0 would otherwise turn every test here into a skip: the driver's own
    ``/proc/driver/nvidia/gpus`` entries, else ``nvidia-smi -L``. Visible-device variables are not
    applied: a machine with a driver and GPUs must run these tests.
    """
    import shutil
    from pathlib import Path

    entries = Path("/proc/driver/nvidia/gpus")
    if entries.is_dir():
        return sum(1 for _ in entries.iterdir())
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))


def _visible_gpus() -> int:
    """The code under test's count, compared with the driver's by the tests (never a gate)."""
    from accelctl_cuda.probe import probe

    return probe().device_count


DRIVER_GPUS = _driver_gpus()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(DRIVER_GPUS == 0, reason="no NVIDIA driver with a GPU on this machine"),
]
GPUS = _visible_gpus() if DRIVER_GPUS else 0


def test_the_probe_sees_the_gpus_the_driver_reports():
    """A probe that says 0 (or another count) on a GPU machine fails here instead of skipping."""
    import os

    if os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        assert GPUS == DRIVER_GPUS
    else:
        assert 0 < GPUS <= DRIVER_GPUS


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def python(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (fails the test on a non-zero exit)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def test_list_shows_cuda_with_torchs_device_count():
    rows = {row["name"]: row for row in json.loads(run("list", "--json").stdout)}
    torch_count = int(python("import torch; print(torch.cuda.device_count())"))
    assert rows["cuda"]["available"] is True, rows["cuda"]
    assert rows["cuda"]["error"] is None and rows["cuda"]["reason"] is None
    assert rows["cuda"]["device_count"] == torch_count == GPUS


def test_resolve_gpu_gives_cuda_0():
    result = run("resolve", "--accelerator", "gpu", "--devices", "1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["accelerator"], data["devices"], data["distributed_backend"]) == (
        "cuda",
        ["cuda:0"],
        "nccl",
    )


def test_one_device_too_many_is_a_clear_error():
    result = run("resolve", "--accelerator", "cuda", "--devices", str(GPUS + 1))
    assert result.exit_code == 1
    assert (
        f"devices='{GPUS + 1}' asks for {GPUS + 1} devices, more than are visible" in result.stderr
    )
    assert "Traceback" not in result.output


def test_stats_have_memory_and_utilization():
    result = run("stats", "cuda", "--json")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert [e["device"] for e in entries] == [f"cuda:{i}" for i in range(GPUS)]
    for entry in entries:
        stats = entry["stats"]
        assert stats["memory_total_bytes"] > 0
        assert 0 < stats["memory_used_bytes"] <= stats["memory_total_bytes"]
        assert 0.0 <= stats["utilization_percent"] <= 100.0
        assert "memory_allocated_bytes" not in stats  # CUDA not in use in this process


def test_detect_list_stats_leave_cuda_uninitialised_and_a_fork_can_use_it():
    out = python(
        """
        import multiprocessing as mp
        import torch, accelctl
        from accelctl.cli import cli

        handle = accelctl.get_accelerator("cuda")
        assert handle.detect() and handle.auto_device_count() > 0
        accelctl.list_accelerators()
        stats = handle.device_stats("cuda:0")
        cli.main(["stats", "--json"], standalone_mode=False)
        cli.main(["list"], standalone_mode=False)
        assert not torch.cuda.is_initialized(), "CUDA initialised in the parent"

        def child(queue):
            queue.put(float(torch.ones(4, device="cuda:0").sum().item()))

        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        proc = ctx.Process(target=child, args=(queue,))
        proc.start()
        proc.join(120)
        assert proc.exitcode == 0, f"forked child failed: exit code {proc.exitcode}"
        print("FORK-OK", queue.get(timeout=5), stats["memory_total_bytes"] > 0)
        """
    )
    assert "FORK-OK 4.0 True" in out


def test_a_tensor_op_on_each_selected_device_and_allocator_stats():
    out = python(
        """
        import torch, accelctl
        selection = accelctl.resolve("cuda", devices="auto")
        for device in selection.devices:
            selection.accelerator.setup_device(device)
            x = torch.arange(1024, device=device, dtype=torch.float32).reshape(32, 32)
            value = float((x @ x.T).trace().item())
            stats = selection.accelerator.device_stats(device)
            assert stats["memory_allocated_bytes"] > 0, stats
            print(str(device), value, stats["cuda.num_ooms"])
        selection.accelerator.teardown()
        """
    )
    # The exact sum of 1,024 squares (3.6e8) is past float32's exact integers (2**24): the GPU's
    # float32 sum is within float32's rounding of it, 1,024 terms each adding at most one ulp.
    expected = float(sum(i * i for i in range(1024)))
    tolerance = 1024 * 2.0**-23  # terms times float32's machine epsilon
    lines = out.split("\n")[:-1]
    assert [line.split()[0] for line in lines] == [f"cuda:{i}" for i in range(GPUS)]
    values = [float(line.split()[1]) for line in lines]
    assert all(abs(v - expected) <= tolerance * expected for v in values), (values, expected)


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_lightnings_defaults_train_on_cuda_through_the_bridge(precision):
    # The bridge's mixed precision names the scaler for the plugin's device type (Lightning 2.3
    # made a CUDA scaler whatever the device); here the device is CUDA, so the scaler must be a
    # working CUDA one, and the machine's Lightning must be adapted (in the window, or with its
    # internals there). Skipped only where the GPU machine has no Lightning.
    pytest.importorskip("lightning")
    out = python(
        f"""
        import json, warnings
        import torch, lightning
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from accelctl.integrations.lightning import ADAPTATION, LightningAccelerator

        class Net(lightning.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(16, 1)
                self.dtypes = set()

            def training_step(self, batch, _):
                x, y = batch
                out = self.layer(x)
                self.dtypes.add(str(out.dtype))
                return torch.nn.functional.mse_loss(out.float(), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.05)

        torch.manual_seed(0)
        x = torch.randn(256, 16)
        y = x.sum(1, keepdim=True)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
        net = Net()
        before = float(torch.nn.functional.mse_loss(net.layer(x), y))
        # Lightning's cluster environment named: its MPI detection imports mpi4py, whose MPI_Init
        # aborts on a machine with Open MPI but no remote shell (the GPU machine here), before
        # any accelctl code runs. Strategy and precision stay Lightning's defaults.
        from lightning.fabric.plugins.environments import LightningEnvironment
        trainer = lightning.Trainer(
            plugins=[LightningEnvironment()],
            accelerator=LightningAccelerator("cuda"), devices=1, precision="{precision}",
            max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(net, loader)
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        after = float(torch.nn.functional.mse_loss(net.layer.cpu()(x), y))
        print(json.dumps({{
            "lightning": lightning.__version__,
            "refusal": ADAPTATION.refusal,
            "covered": ADAPTATION.window.covers(lightning.__version__),
            "warnings": [str(w.message) for w in caught if "accelctl" in str(w.message)],
            "root": str(trainer.strategy.root_device),
            "plugin_device": trainer.precision_plugin.device,
            "scaler": None if scaler is None else [type(scaler).__module__, scaler._device,
                                                   scaler.is_enabled()],
            "dtypes": sorted(net.dtypes),
            "before": before, "after": after,
        }}))
        """
    )
    result = json.loads(out.strip().splitlines()[-1])
    print(result)  # the GPU machine's Lightning, for the record
    assert result["refusal"] == "", result["refusal"]
    assert result["covered"] or len(result["warnings"]) == 1  # newer: adapted, one warning
    assert (result["root"], result["plugin_device"]) == ("cuda:0", "cuda")
    if precision == "16-mixed":
        assert result["scaler"] == ["torch.amp.grad_scaler", "cuda", True]
        assert result["dtypes"] == ["torch.float16"]
    else:
        assert result["scaler"] is None and result["dtypes"] == ["torch.bfloat16"]
    assert result["after"] < 0.5 * result["before"]  # it trained

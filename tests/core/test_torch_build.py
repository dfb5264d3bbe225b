"""``accelctl.torch_build``: torch's version and builds read from ``torch/version.py`` as text."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from accelctl import torch_build
from accelctl._base import torch_build as _torch_build
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
    monkeypatch.setattr(sys, "platform", "linux")
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


def test_one_reader_gives_the_facts_every_plugin_needs(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n"
        "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n"
        "xpu: Optional[str] = None\n"
    )
    found = torch_build.version_literals(tmp_path / "version.py")
    assert found is not None
    build = TorchBuild(found["__version__"], str(tmp_path), found["cuda"], found["hip"])
    assert (build.kind, build.cuda_major, build.describe()) == ("cuda", 13, "torch 2.11.0+cu130")
    assert build.lib_folders == [tmp_path / "lib"]
    rocm = TorchBuild("2.13.0+rocm6.3", "/x", cuda="12.1", hip="6.3.1")  # ROCm sets both, once
    assert (rocm.kind, rocm.cuda_major) == ("hip", None)
    assert TorchBuild("2.13.0+xpu", "/x", xpu="20250101").kind == "cpu"  # not a GPU of CUDA's


def test_the_loaded_module_wins(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "__version__", "2.13.0+rocm6.3")
    monkeypatch.setattr(torch.version, "hip", "6.3.1")
    build = torch_build.read_torch_build()
    assert build is not None
    assert (build.kind, build.source, build.describe()) == ("hip", "loaded", "torch 2.13.0+rocm6.3")


def test_in_a_fresh_process_the_file_is_read_and_import_is_the_last_resort(tmp_path: Path) -> None:
    """In a fresh process torch's version.py is read as text; import is the last resort.

    A fake torch package whose import would fail: its version.py is read. Without a version.py,
    torch is imported (here: a fake whose import works).
    """
    import os
    import subprocess
    import sys

    reads_file = tmp_path / "a" / "torch"
    reads_file.mkdir(parents=True)
    (reads_file / "__init__.py").write_text("raise ImportError('torch must not be imported')\n")
    (reads_file / "version.py").write_text(
        "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n"
    )
    imports = tmp_path / "b" / "torch"
    imports.mkdir(parents=True)
    (imports / "__init__.py").write_text(
        "import types\n__file__ = __file__\n"
        "version = types.SimpleNamespace(cuda=None, hip='6.0', xpu=None)\n__version__ = '9.9'\n"
    )
    code = (
        "import sys; from accelctl.torch_build import read_torch_build; b = read_torch_build(); "
        "print(b.version, b.kind, b.source, 'torch' in sys.modules)"
    )
    results = []
    for folder in (reads_file.parent, imports.parent):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), *sys.path]))
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr
        results.append(run.stdout.split())
    assert results == [
        ["2.11.0+cu130", "cuda", "version.py", "False"],
        ["9.9", "hip", "import", "True"],
    ]


def test_the_cuda_and_xpu_plugins_read_the_build_through_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both ask accelctl.Accelerator.installed_torch(), which reads it through read_torch_build.
    import accelctl_cuda.probe
    import accelctl_xpu.probe
    from accelctl_xpu.driver import IntelGpu

    reads: list[str] = []
    monkeypatch.setattr(_torch_build, "read_torch_build", lambda: reads.append("read"))
    monkeypatch.setattr(sys, "platform", "linux")  # each has a GPU driver, but no torch
    monkeypatch.setattr(accelctl_cuda.probe.nvml, "driver_files_present", lambda: True)
    monkeypatch.setattr(accelctl_xpu.probe.driver, "intel_gpus", lambda: [IntelGpu(0, "xe")])
    for module in (accelctl_cuda.probe, accelctl_xpu.probe):
        assert module.probe({}).reason == "torch is not installed (pip install torch)"
    assert reads == ["read", "read"]


# -- how accelctl imports torch ------------------------------------------------------------------

#: Run in a fresh interpreter on a fake site: import torch through accelctl while recording every
#: write of torch's autoload switch to os.environ, then print what happened as JSON.
_IMPORT_AND_RECORD = """
import json, os, sys
writes = []
environ_type = type(os.environ)
setitem = environ_type.__setitem__
def recording(self, key, value):
    if key == "TORCH_DEVICE_BACKEND_AUTOLOAD":
        writes.append(value)
    setitem(self, key, value)
environ_type.__setitem__ = recording
import warnings
warnings.simplefilter("error")  # a PluginWarning would be a failure of what is asked
from accelctl._host.isolation import import_torch
from accelctl import PluginLoadError
try:
    import_torch()
    outcome = "imported"
except PluginLoadError as exc:
    outcome = str(exc)
print(json.dumps({"outcome": outcome, "writes": writes,
                  "loaded": "backend_marker" in sys.modules,
                  "switch": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")}))
"""

_BACKEND = {"backend_marker": "def load():\n    pass\n"}
_FAILING = {"backend_failing": "def load():\n    raise RuntimeError('no vendor runtime here')\n"}


def _import_in_fresh_interpreter(fake_site) -> dict[str, object]:
    import json
    import os
    import subprocess

    environ = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    environ["PYTHONPATH"] = os.pathsep.join(fake_site.path)
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_AND_RECORD],
        capture_output=True, text=True, env=environ, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_torch_is_imported_with_its_own_autoload_and_no_change_to_the_environment(
    fake_site,
) -> None:
    fake_site.install(
        "acme-backend", {"marker": "backend_marker:load"}, modules=_BACKEND, group="torch.backends"
    )
    found = _import_in_fresh_interpreter(fake_site)
    # torch's autoload loaded the backend; accelctl never wrote the switch.
    assert found == {"outcome": "imported", "writes": [], "loaded": True, "switch": None}


def test_only_an_unreadable_entry_points_file_turns_the_autoload_off_around_the_import(
    fake_site,
) -> None:
    fake_site.install(
        "acme-backend", {"marker": "backend_marker:load"}, modules=_BACKEND, group="torch.backends"
    )
    fake_site.install_raw("unrelated", {"entry_points.txt": "[console_scripts]\nno-equals-sign\n"})
    found = _import_in_fresh_interpreter(fake_site)
    # Off for the import, put back after, and the backend loaded from accelctl's scan.
    assert found == {"outcome": "imported", "writes": ["0"], "loaded": True, "switch": None}


def test_a_backend_that_fails_to_load_is_named_with_how_to_turn_it_off(fake_site) -> None:
    fake_site.install(
        "acme-failing",
        {"failing": "backend_failing:load"},
        modules=_FAILING,
        group="torch.backends",
    )
    found = _import_in_fresh_interpreter(fake_site)
    outcome = str(found["outcome"])
    assert outcome.startswith("importing torch failed: RuntimeError: Failed to load the backend")
    assert "Failed to load the backend extension: failing." in outcome
    assert outcome.endswith(
        "uninstall that backend's package, or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to keep torch "
        "from loading it"
    )

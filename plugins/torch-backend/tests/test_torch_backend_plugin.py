"""The torch-backend plugin without a real backend: saying no cheaply (no torch import), and why.

Package metadata comes from real (fake) distributions on a path of their own, never from what
this environment has installed; the probes that must not import torch run in a fresh interpreter.
The real backend (torch_openreg) is exercised in ``test_torch_backend_openreg.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap

import pytest

import accelctl
import accelctl.torch_backends
import accelctl_torch_backend
from accelctl_torch_backend import packages
from accelctl_torch_backend.probe import probe

from fakedists import FakeSite

#: A fresh interpreter imports accelctl in a second or two; the limit only guards against a hang.
HANG_GUARD_S = 120


def install_backend_package(site: FakeSite) -> None:
    """A distribution that declares a torch backend, as torch_npu or torch_openreg do."""
    site.install(
        "torch_fakedev",
        {"torch_fakedev": "torch_fakedev:_autoload"},
        group="torch.backends",
        version="2.0",
    )


def probe_in_fresh_interpreter(path: list[str], environ: dict[str, str]) -> dict[str, object]:
    code = textwrap.dedent(
        """
        import json, sys
        from accelctl_torch_backend.probe import probe
        found = probe(path=json.loads(sys.argv[1]), environ=json.loads(sys.argv[2]))
        print(json.dumps({"available": found.available, "reason": found.reason,
                          "torch": "torch" in sys.modules}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(path), json.dumps(environ)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)
    return found


def test_no_backend_package_says_no_without_importing_torch(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-good", {"good": "fakeplugins.good:GoodAccelerator"})
    found = probe_in_fresh_interpreter(fake_site.path, {})
    assert found == {
        "available": False,
        "reason": "no out-of-tree torch backend is installed (no package declares the "
        "torch.backends entry-point group)",
        "torch": False,
    }


@pytest.mark.parametrize("value", ["0", "false"])
def test_autoload_off_says_no_without_importing_torch_and_what_to_do(
    fake_site: FakeSite, value: str
) -> None:
    install_backend_package(fake_site)
    found = probe_in_fresh_interpreter(fake_site.path, {"TORCH_DEVICE_BACKEND_AUTOLOAD": value})
    assert found["available"] is False and found["torch"] is False
    assert found["reason"] == (
        f"TORCH_DEVICE_BACKEND_AUTOLOAD={value} keeps torch from loading torch_fakedev 2.0; "
        "unset it, or import the backend's package (torch_fakedev) before accelctl looks"
    )


def test_torch_loaded_without_a_backend_says_which_package_registered_nothing(
    fake_site: FakeSite,
) -> None:
    import torch

    assert torch._C._get_privateuse1_backend_name() == "privateuseone"  # conftest: no autoload
    install_backend_package(fake_site)
    found = probe(path=fake_site.path, environ={})
    assert not found.available and found.name is None
    assert found.reason == (
        "torch_fakedev 2.0 loaded with torch but registered no PrivateUse1 device "
        "(torch's slot is still unnamed)"
    )


def test_unavailable_hooks_and_info_without_a_backend(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    handle = accelctl.AcceleratorHandle.from_object(
        accelctl_torch_backend.PrivateUse1Accelerator(), name="privateuse1"
    )
    assert handle.detect() is False and handle.auto_device_count() == 0
    assert handle.info == accelctl.AcceleratorInfo(
        description="out-of-tree torch backend (PrivateUse1): none loaded", priority=50
    )
    with pytest.raises(accelctl.DeviceSpecError, match="no privateuse1 device is visible"):
        handle.parse_devices("auto")
    with pytest.raises(accelctl.PluginHookError, match="no PrivateUse1 backend is loaded"):
        handle.device_stats("cpu")


def test_metadata_scan_reads_both_groups_once_per_path(fake_site: FakeSite) -> None:
    install_backend_package(fake_site)
    fake_site.install("accelctl-fakedev", {"fakedev": "fakedev_mod"})
    installed = packages.scan(fake_site.path)
    assert [p.describe() for p in installed.backends] == ["torch_fakedev 2.0"]
    assert installed.backends[0].module == "torch_fakedev"
    assert installed.plugin_distributions("FakeDev") == ["accelctl-fakedev"]
    assert packages.scan(fake_site.path) is installed  # cached: torch reads its group once too


def test_on_the_default_path_the_backends_come_from_accelctls_one_scan(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The registry's scan (the one `list` makes to find the plugins) found the backend package;
    # the plugin asks it rather than reading every installed distribution a second time.
    install_backend_package(fake_site)
    fake_site.install("accelctl-fakedev", {"fakedev": "fakedev_mod"})  # a dedicated plugin
    accelctl.list_accelerators(detect=False)  # the scan `list` makes first
    scans = []
    real = importlib.metadata.distributions
    monkeypatch.setattr(
        importlib.metadata, "distributions", lambda **kw: scans.append(kw) or real(**kw)
    )
    installed = packages.scan()
    assert [p.describe() for p in installed.backends] == ["torch_fakedev 2.0"]
    assert installed.backends[0].module == "torch_fakedev"
    assert [
        (e.name, e.value, e.distribution) for e in accelctl.torch_backends.backend_entry_points()
    ] == [("torch_fakedev", "torch_fakedev:_autoload", "torch_fakedev")]
    # Whether a dedicated plugin claims the backend's name: the same scan's answer too.
    assert installed.plugin_distributions("FakeDev") == ["accelctl-fakedev"]
    assert installed.plugin_distributions("otherdev") == []
    assert scans == []


def test_priority_sits_between_the_cpu_and_the_gpu_plugins() -> None:
    assert 0 < accelctl_torch_backend.PRIORITY < 100


def test_list_row_without_a_backend_imports_no_torch(fake_site: FakeSite) -> None:
    # `accelctl list` with this plugin installed, in a fresh interpreter: the real list path.
    code = textwrap.dedent(
        """
        import json, sys
        from accelctl.cli import main
        sys.argv = ["accelctl", "list", "--json"]
        try:
            main()
        except SystemExit:
            pass
        print("TORCH=" + str("torch" in sys.modules), file=sys.stderr)
        """
    )
    environ = {
        **os.environ,
        "ACCELCTL_PLUGINS": "cpu,privateuse1",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
    }
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120
    )
    assert "TORCH=False" in result.stderr, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    row = rows["privateuse1"]
    assert (row["available"], row["device_count"], row["priority"]) == (False, 0, 50)
    assert row["distribution"] == "accelctl-torch-backend"
    assert row["reason"]  # which of the no-torch reasons depends on what is installed here


def test_distributed_backend_is_the_one_torch_maps_the_device_type_to() -> None:
    from accelctl_torch_backend.probe import _distributed_backend

    assert _distributed_backend("cuda") == "nccl"  # torch's own map, no device needed
    assert _distributed_backend("openreg") is None  # nothing registered: one process only

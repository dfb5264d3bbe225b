"""``accelctl env``: a block to paste into a bug report.

Platform, Python, torch and the GPU runtimes it was built for, accelctl and every plugin with its
distribution version, each accelerator's availability and device count, driver versions where the
machine tells them, and the environment variables that steer device selection.

torch's facts come from ``torch/version.py`` read as text (:mod:`accelctl.torch_build`): the command
imports no torch where the plugins need none (a machine without a GPU), and no device runtime is
initialised: a CUDA context is never created here. On macOS torch is imported to ask whether it
has MPS.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from .._project import (
    ENV_ACCELERATOR,
    ENV_DEVICES,
    ENV_DISABLE,
    ENV_HOOK_TIMEOUT,
    ENV_PLUGINS,
    PROJECT_NAME,
)
from .._text import printable_line
from ..registry import list_accelerators
from ..torch_build import cudnn_version, mps_built, read_torch_build
from ._output import emit_json

#: Variables that steer which devices torch and the runtimes expose, shown when set.
DEVICE_VARIABLES = (
    ENV_ACCELERATOR,
    ENV_PLUGINS,
    ENV_DISABLE,
    ENV_DEVICES,
    ENV_HOOK_TIMEOUT,
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "HABANA_VISIBLE_MODULES",
    "ZE_AFFINITY_MASK",
    "ONEAPI_DEVICE_SELECTOR",
    "TPU_VISIBLE_CHIPS",
)


@dataclass
class Environment:
    """Everything ``accelctl env`` reports, as plain data."""

    platform: str
    python: str
    accelctl: str
    torch: dict[str, Any]
    accelerators: list[dict[str, Any]]
    drivers: dict[str, str] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "platform": self.platform,
            "python": self.python,
            "accelctl": self.accelctl,
            "torch": self.torch,
            "accelerators": self.accelerators,
            "drivers": self.drivers,
            "variables": self.variables,
        }


def _torch_info() -> dict[str, Any]:
    """torch's version and builds, read from ``torch/version.py`` without importing torch;
    ``{"version": None, "error": ...}`` when it is missing or broken."""
    try:
        build = read_torch_build()
        if build is None:
            return {"version": None, "error": "torch is not installed (pip install torch)"}
        info: dict[str, Any] = {
            "version": build.version,
            "path": build.path,
            "cuda": build.cuda,
            "hip": build.hip,
            "xpu": build.xpu,
            "mps_built": mps_built(build),
            "cudnn": cudnn_version(build),
            "source": build.source,
        }
    except Exception as exc:  # a broken install: that is the report
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"}
    return info


#: Files whose presence says an NVIDIA driver is loaded (Linux); only then is NVML asked.
NVIDIA_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg")


def _nvidia_driver() -> str | None:
    """The NVIDIA driver and its CUDA version through NVML, where a driver is there."""
    present = any(Path(path).exists() for path in NVIDIA_DRIVER_FILES)
    if not present and not sys.platform.startswith("win"):
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
    except Exception:  # no nvidia-ml-py, or no working driver: nothing known
        return None
    driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    return f"{driver} (CUDA {cuda // 1000}.{(cuda % 1000) // 10})"


def _amd_driver() -> str | None:
    try:
        return Path("/sys/module/amdgpu/version").read_text().strip() or None
    except OSError:
        return None


def _drivers() -> dict[str, str]:
    found = {"nvidia": _nvidia_driver(), "amdgpu": _amd_driver()}
    if sys.platform == "darwin":
        found["macos"] = platform.mac_ver()[0] or None
    return {name: value for name, value in found.items() if value}


def _accelerators() -> list[dict[str, Any]]:
    rows = []
    for record in list_accelerators():
        rows.append(
            {
                "name": record.name,
                "distribution": record.distribution,
                "version": record.version,
                "state": record.state,
                "available": record.available,
                "device_count": record.device_count,
                "reason": record.reason,
                "error": record.error,
            }
        )
    return rows


def _accelctl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROJECT_NAME)
    except PackageNotFoundError:
        return "0+unknown (not installed)"


def collect() -> Environment:
    """Gather the report (no torch import where the plugins need none; no device initialised)."""
    variables = {name: os.environ[name] for name in DEVICE_VARIABLES if name in os.environ}
    return Environment(
        platform=platform.platform(),
        python=(
            f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"
        ),
        accelctl=_accelctl_version(),
        torch=_torch_info(),
        accelerators=_accelerators(),
        drivers=_drivers(),
        variables=variables,
    )


def _yes(value: Any) -> str:
    return str(value) if value else "no"


def render(env: Environment) -> str:
    """The human block: ``key: value`` lines, one accelerator per line."""
    torch = env.torch
    if torch.get("version") is None:
        torch_line = f"not importable ({torch.get('error')})"
    else:
        torch_line = (
            f"{torch['version']} (CUDA: {_yes(torch['cuda'])}, HIP: {_yes(torch['hip'])}, "
            + (f"XPU: {torch['xpu']}, " if torch.get("xpu") else "")
            + f"MPS: {'yes' if torch['mps_built'] else 'no'}"
            + (f", cuDNN: {torch['cudnn']}" if torch.get("cudnn") else "")
            + f") at {torch['path']}"
        )
    lines = [
        f"platform:  {env.platform}",
        f"python:    {env.python}",
        f"torch:     {torch_line}",
        f"accelctl:  {env.accelctl}",
        "accelerators:",
    ]
    if not env.accelerators:
        lines.append("  none installed (pip install accelctl-cpu)")
    width = max((len(a["name"]) for a in env.accelerators), default=0)
    for row in env.accelerators:
        plugin = " ".join(filter(None, [row["distribution"], row["version"]])) or "?"
        if row["error"]:
            state = f"broken: {row['error']}"
        elif row["available"]:
            count = row["device_count"]
            state = f"available, {count} device{'s' if count != 1 else ''}"
        else:
            state = row["state"] + (f": {row['reason']}" if row["reason"] else "")
        lines.append(f"  {row['name'].ljust(width)}  {plugin}: {state}")
    lines.append("drivers:")
    lines += [f"  {name}: {value}" for name, value in env.drivers.items()] or ["  none found"]
    lines.append("variables:")
    lines += [f"  {name}={value}" for name, value in env.variables.items()] or ["  none set"]
    return "\n".join(printable_line(line) for line in lines)  # plugins' text: escaped, bounded


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def env_command(as_json: bool) -> None:
    """Print platform, Python, torch and its builds, accelctl and its plugins with versions,
    drivers and device variables: a block to paste into a bug report."""
    env = collect()
    if as_json:
        emit_json(env.to_dict())
    else:
        click.echo(render(env))

"""``accelctl env``: a block to paste into a bug report.

Platform, Python, torch and the GPU runtimes it was built for, accelctl and every plugin with its
distribution version, each accelerator's availability and device count, the facts each plugin adds
through its optional ``environment_info`` hook (drivers, the vendor's visible-device variables),
and accelctl's own environment variables.

The core knows no vendor: a driver or a vendor's variable is the plugin's to report. torch's facts
come from ``torch/version.py`` read as text (:mod:`accelctl.torch_build`): the command imports no
torch where the plugins need none (a machine without a GPU), and no device runtime is initialised:
a CUDA context is never created here.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from .._deadline import run_all
from .._errors import AccelctlError
from .._handle import AcceleratorHandle
from .._project import (
    ENV_ACCELERATOR,
    ENV_DEVICES,
    ENV_DISABLE,
    ENV_HOOK_TIMEOUT,
    ENV_PLUGINS,
)
from .._registry import AcceleratorRecord, list_accelerators
from .._text import one_line, printable_line
from ..torch_build import cudnn_version, mps_built, read_torch_build
from ._output import emit_json

#: accelctl's own variables, shown when set (a vendor's variables are its plugin's to report).
DEVICE_VARIABLES = (
    ENV_ACCELERATOR,
    ENV_PLUGINS,
    ENV_DISABLE,
    ENV_DEVICES,
    ENV_HOOK_TIMEOUT,
)


@dataclass
class Environment:
    """Everything ``accelctl env`` reports, as plain data."""

    platform: str
    python: str
    accelctl: str
    torch: dict[str, Any]
    accelerators: list[dict[str, Any]]
    variables: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "platform": self.platform,
            "python": self.python,
            "accelctl": self.accelctl,
            "torch": self.torch,
            "accelerators": self.accelerators,
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


def _facts(handle: AcceleratorHandle) -> dict[str, Any]:
    return handle.environment_info()


def _accelerators() -> list[dict[str, Any]]:
    records = list_accelerators()
    rows = [_row(record) for record in records]
    # Only working plugins are asked (a broken one's row says why already), all concurrently,
    # each call under the hook deadline: a hanging plugin costs the deadline once, not per plugin.
    asked = [
        (row, record.handle)
        for row, record in zip(rows, records, strict=True)
        if record.handle is not None and record.state != "broken"
    ]
    outcomes = run_all([functools.partial(_facts, handle) for _, handle in asked])
    for (row, _), outcome in zip(asked, outcomes, strict=True):
        if isinstance(outcome.error, AccelctlError):
            row["environment_error"] = one_line(outcome.error)
        else:
            row["environment"] = outcome.unwrap()
    return rows


def _row(record: AcceleratorRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "distribution": record.distribution,
        "version": record.version,
        "state": record.state,
        "available": record.available,
        "device_count": record.device_count,
        "reason": record.reason,
        "error": record.error,
        "environment": {},
        "environment_error": None,
    }


def _accelctl_version() -> str:
    import accelctl  # its __version__ is the one lookup of the installed version

    return str(accelctl.__version__)


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
        variables=variables,
    )


def _yes(value: Any) -> str:
    return str(value) if value else "no"


def _fact(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


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
        lines += [f"    {key}: {_fact(value)}" for key, value in row["environment"].items()]
        if row["environment_error"]:
            lines.append(f"    environment_info() failed: {row['environment_error']}")
    lines.append("variables:")
    lines += [f"  {name}={value}" for name, value in env.variables.items()] or ["  none set"]
    return "\n".join(printable_line(line) for line in lines)  # plugins' text: escaped, bounded


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def env_command(as_json: bool) -> None:
    """Print platform, Python, torch and its builds, accelctl and its plugins with versions and
    the facts each plugin adds (drivers, device variables): a block to paste into a bug report."""
    env = collect()
    if as_json:
        emit_json(env.to_dict())
    else:
        click.echo(render(env))

"""``accelctl env``: a block to paste into a bug report.

The core knows no vendor: drivers and a vendor's variables are each plugin's ``environment_info``
to report. torch's facts are read without importing it (:mod:`accelctl.torch_build`), and no
device runtime is initialised.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict, dataclass
from typing import Any

import click

import accelctl

from .._base.text import one_line, printable_line
from .._contract import settings
from .._contract.errors import AccelctlError
from .._host.fanout import run_each
from .._host.handle import AcceleratorHandle
from .._host.registry import list_accelerators
from .._host.status import AcceleratorStatus
from ..torch_build import cudnn_version, mps_built, read_torch_build
from ._child import run_in_child
from ._output import emit_json


@dataclass
class Environment:
    """Everything ``accelctl env`` reports, as plain data."""

    platform: str
    python: str
    accelctl: str
    torch: dict[str, Any]
    accelerators: list[dict[str, Any]]
    variables: dict[str, str]


def _torch_info() -> dict[str, Any]:
    """Return torch's version and builds, read without importing torch.

    Read from ``torch/version.py``; ``{"version": None, "error": ...}`` when it is missing or
    broken."""
    try:
        build = read_torch_build()
        if build is None:
            return {"version": None, "error": "torch is not installed (pip install torch)"}
        return {
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


def _accelerators() -> list[dict[str, Any]]:
    """Return a row per plugin: its status and its ``environment_info``.

    Its status (:func:`accelctl.list_accelerators`), then the ``environment_info`` of each loaded
    one that answered, asked of all at once, each under the deadline."""
    statuses = list_accelerators()
    asked = [s.accelerator for s in statuses if s.error is None and s.accelerator.state == "loaded"]
    facts = dict(zip(asked, run_each(asked, AcceleratorHandle.environment_info), strict=True))
    rows = []
    for status in statuses:
        row = _row(status)
        environment = facts.get(status.accelerator)
        if isinstance(environment, AccelctlError):  # it raised, or did not answer in time
            row["environment_error"] = one_line(environment)
        elif environment is not None:
            row["environment"] = environment
        rows.append(row)
    return rows


def _row(status: AcceleratorStatus) -> dict[str, Any]:
    return {
        "name": status.name,
        "plugin": status.plugin_name,
        "distribution": status.distribution,
        "version": status.version,
        "state": status.state,
        "available": status.available,
        "device_count": status.device_count,
        "reason": status.reason,
        "error": status.error,
        "environment": {},
        "environment_error": None,
    }


def collect() -> Environment:
    """Gather the report (no torch import where the plugins need none; no device initialised)."""
    return Environment(
        platform=platform.platform(),
        python=(
            f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"
        ),
        accelctl=str(accelctl.__version__),  # the one lookup of the installed version
        torch=_torch_info(),
        accelerators=_accelerators(),
        variables=settings.set_variables(),  # accelctl's own, when set
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
        if row["plugin"] != row["name"]:  # a bug report needs the plugin's own name too
            plugin += f" (plugin {row['plugin']})"
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
    """Print the environment as a block to paste into a bug report.

    Platform, Python, torch and its builds, accelctl and its plugins with versions, and the facts
    each plugin adds (drivers, device variables)."""
    [env] = run_in_child(lambda: iter([collect()]))  # the plugins asked in a process of their own
    if as_json:
        emit_json(asdict(env))
    else:
        click.echo(render(env))

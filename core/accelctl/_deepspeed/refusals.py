"""The DeepSpeed set-ups that cannot run on a plugin's device, read from a config alone.

The words and the conditions shared by the DeepSpeed bridge's ``deepspeed.initialize`` (in each
process) and ``accelctl launch`` (before any process starts, where the script's command line names
the config; docs/design/deepspeed-refused-at-launch.md). Neither DeepSpeed nor torch is imported
here; :func:`runs_float64` imports torch when it is asked.

- ZeRO-Offload with a DeepSpeed optimizer steps with DeepSpeed's compiled CPU op, which on a
  plugin's device is compiled on first use (:func:`accelctl._deepspeed.builds.host_build_problem`).
- ZeRO stage 3 with a DeepSpeed release before :data:`NORMS_FOLLOW_DEVICE` computes its gradient
  norms in float64 whatever the device has.

On the CPU neither applies: DeepSpeed's own CPU builds and float64 are there.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .builds import OFFLOAD_OPTIMIZERS, host_build_problem

#: The first release whose ZeRO-3 norms follow the accelerator's ``is_fp64_supported()``
#: (:func:`norms_follow_device` looks for its ``deepspeed.runtime.zero.utils.get_norm_dtype``).
NORMS_FOLLOW_DEVICE = "0.19.6"
#: The options a script takes its DeepSpeed config file by: DeepSpeed's ``add_config_arguments``,
#: transformers' ``TrainingArguments`` (a path ending in ``.json``; ``--deepspeed`` alone is
#: DeepSpeed's flag), Accelerate's ``launch`` and ``config``.
CONFIG_OPTIONS = ("--deepspeed_config", "--deepspeed", "--deepspeed_config_file")


def zero_stage(config: Mapping[str, Any] | None) -> int | None:
    """The ZeRO stage ``config`` asks for; None where it names none."""
    zero = (config or {}).get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, dict) else None
    return stage if isinstance(stage, int) else None


def offload_device(config: Mapping[str, Any] | None) -> str | None:
    """Return where ``config`` offloads the optimizer, or None.

    ``"cpu"`` or ``"nvme"``, as written."""
    zero = (config or {}).get("zero_optimization")
    offload = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    device = offload.get("device") if isinstance(offload, dict) else None
    return str(device) if str(device).lower() in ("cpu", "nvme") else None


def offload_where(config: Mapping[str, Any], accelerator: str, device: object) -> str:
    """Name the set-up that a refusal of ``config``'s offload refers to.

    Such as ``ZeRO-Offload (offload_optimizer: cpu) on accelctl accelerator 'openreg'
    (openreg:0)``."""
    return (
        f"ZeRO-Offload (offload_optimizer: {offload_device(config)}) on accelctl accelerator "
        f"{accelerator!r} ({device})"
    )


#: The way out the offload refusals offer: a torch optimizer instead of DeepSpeed's.
TORCH_OPTIMIZER_INSTEAD = (
    "pass a torch optimizer, deepspeed.initialize(optimizer=torch.optim.AdamW(...)), with "
    '"zero_force_ds_cpu_optimizer": false in the config'
)


def offload_refusal(
    config: Mapping[str, Any] | None, accelerator: str, device: object
) -> str | None:
    """Say why ``config``'s ZeRO-Offload cannot run beside ``device`` here; None where it can.

    ``config`` names a DeepSpeed optimizer (``"optimizer": {"type": "AdamW"}``, ...); ``device``
    is ``accelerator``'s. Its CPU op is compiled on first use, and this machine may lack what
    that takes. None also where the config names no such optimizer (a torch optimizer passed to
    ``deepspeed.initialize`` is the bridge's own check: only the script knows it)."""
    if config is None or offload_device(config) is None:
        return None
    named = config.get("optimizer")
    if not isinstance(named, dict):
        return None
    kind = str(named.get("type", "")).lower()
    params = named.get("params")
    torch_adam = isinstance(params, dict) and bool(params.get("torch_adam"))
    builder = OFFLOAD_OPTIMIZERS.get(kind)
    if builder is None or (kind.startswith("adam") and torch_adam):
        return None  # no CPU op: torch's Adam steps on the CPU
    problem = host_build_problem()
    if problem is None:
        return None
    op = builder.removesuffix("Builder")
    return (
        f'{offload_where(config, accelerator, device)} with "optimizer": {{"type": '
        f'"{named.get("type")}"}} steps with DeepSpeed\'s compiled op {op} ({builder}), which '
        f"DeepSpeed compiles on first use beside a plugin's device, and this machine has "
        f"{problem}. Install them (the first build takes minutes), or {TORCH_OPTIMIZER_INSTEAD}"
        + (', or set "torch_adam": true in the optimizer\'s "params"' if op == "CPUAdam" else "")
    )


def deepspeed_release() -> str | None:
    """Return the installed DeepSpeed's version from its metadata, or None.

    DeepSpeed is not imported. None where it is not installed."""
    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def norms_follow_device() -> bool:
    """Say whether the installed DeepSpeed keeps ZeRO-3's gradient norms out of float64.

    For an accelerator without float64: its ``deepspeed.runtime.zero.utils`` defines
    ``get_norm_dtype`` (0.19.6 and later). Read from the module where DeepSpeed is imported, else
    from its source with :mod:`ast` (DeepSpeed is not imported); True where it cannot be told, so
    that nothing is refused on a guess."""
    loaded = sys.modules.get("deepspeed.runtime.zero.utils")
    if loaded is not None:
        return hasattr(loaded, "get_norm_dtype")
    try:
        spec = importlib.util.find_spec("deepspeed")
    except (ImportError, ValueError):
        return True
    for folder in spec.submodule_search_locations or () if spec is not None else ():
        try:
            tree = ast.parse((Path(folder) / "runtime" / "zero" / "utils.py").read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        return any(
            isinstance(node, ast.FunctionDef) and node.name == "get_norm_dtype"
            for node in tree.body
        )
    return True


def runs_float64(device_type: str) -> bool:
    """Say whether ``device_type``'s devices run what DeepSpeed computes in float64.

    That is ZeRO's gradient norms: norm, power, sum, inf/nan. Imports torch and runs them on the
    current device."""
    import torch

    try:
        norm = torch.ones(4, dtype=torch.float64, device=device_type).norm(2.0) ** 0.5
        return not bool(norm.isinf().logical_or(norm.isnan()).item())
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def float64_norms_refusal(
    stage: int | None, accelerator: str, device: object, has_float64: Callable[[], bool]
) -> str | None:
    """Say why ZeRO ``stage`` cannot run on ``device`` of ``accelerator``; None where it can.

    Stage 3, a DeepSpeed release that computes its norms in float64 anyway, and a device without
    float64 (``has_float64()``, asked last: it may run on the device); None where it can run."""
    if stage != 3 or norms_follow_device() or has_float64():
        return None
    return (
        f"ZeRO stage 3 on accelctl accelerator {accelerator!r} ({device}): DeepSpeed "
        f"{deepspeed_release()} computes ZeRO-3's gradient norms in float64, which the device "
        f"does not run (norm, abs, isinf on float64); DeepSpeed {NORMS_FOLLOW_DEVICE} and later "
        f"keep them in float32 there. pip install 'deepspeed>={NORMS_FOLLOW_DEVICE}', or use ZeRO "
        f"stage 1 or 2"
    )


@dataclass(frozen=True)
class GivenConfig:
    """A DeepSpeed config a script's command line names, read."""

    #: The option that named it, as typed (``--deepspeed_config``).
    option: str
    #: The path as given.
    path: str
    #: The config.
    config: dict[str, Any]


def config_on_command_line(script_args: Sequence[str]) -> GivenConfig | None:
    """Read the DeepSpeed config that ``script_args`` names, or return None.

    The first of :data:`CONFIG_OPTIONS` in ``script_args`` names it (``--deepspeed_config PATH`` or
    ``--deepspeed_config=PATH``; ``--deepspeed`` only with a ``.json`` path). None where none is
    named before ``--``, or it is not a readable JSON object (the script and DeepSpeed then say what
    is wrong with it)."""
    args = list(script_args)
    for index, arg in enumerate(args):
        if arg == "--":
            return None
        option, equals, value = arg.partition("=")
        if option not in CONFIG_OPTIONS:
            continue
        if not equals:
            if index + 1 >= len(args):
                return None
            value = args[index + 1]
        if option == "--deepspeed" and not value.lower().endswith(".json"):
            continue  # DeepSpeed's own --deepspeed is a flag; the next word is another's
        try:
            config = json.loads(Path(value).read_text())
        except (OSError, ValueError):
            return None
        return GivenConfig(option, value, config) if isinstance(config, dict) else None
    return None

"""``accelctl new-plugin``'s templates: a ready plugin package for a new accelerator.

The templates are plain strings (``string.Template``, ``$name`` placeholders), so no package data
is needed. The package they make installs, loads and passes ``accelctl validate`` as generated:
every hook is written and documented, and ``detect()`` says "not detected" until its author
teaches it to find the hardware.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from string import Template

from ._info import is_valid_name
from ._project import RESERVED_NAMES


@dataclass(frozen=True)
class PluginNames:
    """The names of a new plugin package, derived from the accelerator's canonical name."""

    name: str
    #: The pip distribution, ``accelctl-<name>``.
    distribution: str
    #: The import package, ``accelctl_<name>`` (``-`` becomes ``_``).
    module: str
    #: The ``torch.device`` type placeholder: the name as an identifier.
    device_type: str

    @classmethod
    def for_name(cls, name: str) -> PluginNames:
        """Derive the names; :func:`name_problem` must have accepted ``name``."""
        identifier = re.sub(r"[^a-z0-9_]", "_", name)
        return cls(
            name=name,
            distribution=f"accelctl-{name}",
            module=f"accelctl_{identifier}",
            device_type=identifier,
        )

    def substitutions(self) -> dict[str, str]:
        """The values of the templates' placeholders."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "module": self.module,
            "device_type": self.device_type,
            "title": self.name.upper() if len(self.name) <= 4 else self.name,
        }


#: The longest name ``new-plugin`` accepts: it names a distribution, a module and files, whose
#: names file systems bound (255 bytes is common), and no accelerator needs more.
MAX_NAME_LENGTH = 64


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a new accelerator's canonical name, or None when it can."""
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"{name[:20]!r}... is {len(name)} characters long: an accelerator name has at most "
            f"{MAX_NAME_LENGTH} (it names a package, a module and files)"
        )
    if not is_valid_name(name):
        lower = name.strip().lower()
        hint = f" (did you mean {lower!r}?)" if is_valid_name(lower) else ""
        return (
            f"{name!r} is not a valid accelerator name: use lowercase letters, digits, '_' and "
            f"'-', as in 'npu' or 'my-chip'{hint}"
        )
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved (reserved: {', '.join(sorted(RESERVED_NAMES))})"
    if name.startswith("accelctl-") or name.startswith("accelctl_"):
        short = name[len("accelctl-") :]
        return (
            f"{name!r} is a distribution name; give the accelerator's own name ({short!r}): the "
            f"package is then called accelctl-{short}"
        )
    if not name[0].isalpha():
        return f"{name!r} must start with a letter (it names a Python package and a device type)"
    return None


def render(names: PluginNames) -> dict[str, str]:
    """The package's files: relative path -> content."""
    values = names.substitutions()
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"src/{names.module}/__init__.py": MODULE,
        f"src/{names.module}/py.typed": "",
        f"tests/test_{names.module}_conformance.py": TEST,
    }
    return {path: Template(text).substitute(values) for path, text in files.items()}


def write(names: PluginNames, parent: Path) -> tuple[Path, list[Path]]:
    """Write the package into ``parent / names.distribution``.

    :returns: the package folder and the files written.
    :raises FileExistsError: when the package folder exists already (nothing is overwritten).
    :raises OSError: when it cannot be written; what was written of it is removed.
    """
    root = parent / names.distribution
    root.mkdir(exist_ok=False)
    written = []
    try:
        for relative, content in render(names).items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            written.append(path)
    except BaseException:  # a full disk, or Ctrl-C: no half-written package is left behind
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root, written


PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$distribution"
version = "0.1.0"
description = "accelctl plugin: the $title accelerator"
readme = "README.md"
requires-python = ">=3.10"
# torch comes with accelctl; import it (and your vendor's runtime) inside the hooks only.
dependencies = ["accelctl>=0.1"]

[project.optional-dependencies]
test = ["pytest>=8"]

# The entry point makes the accelerator visible to accelctl: its name is the accelerator's
# canonical name, its value the module (or "module:Class") with the hooks.
[project.entry-points."accelctl.accelerators"]
$name = "$module"

[tool.setuptools.package-data]
$module = ["py.typed"]
"""

README = """\
# $distribution

The $title accelerator for [accelctl](https://pypi.org/project/accelctl/): pip-installable
PyTorch accelerators.

```bash
pip install -e .            # or: pip install $distribution
accelctl list               # $name appears, with whether it is available here and why
accelctl validate $name     # the conformance checks: exit 0 when all pass
pytest tests                # the same checks, one pytest test each
```

## Status

Generated by `accelctl new-plugin $name`: every hook in `src/$module/__init__.py` is written and
documented, and `detect()` answers "not detected" until it is taught to find the hardware.
Fill in, in this order, running `accelctl validate $name` after each step:

1. `detect()` and `unavailable_reason()`: find the hardware cheaply (is the vendor's package
   installed? does its runtime see a device?), and say why not in one line.
2. `auto_device_count()`: the visible devices, honouring your visible-devices variable.
3. `DEVICE_TYPE`: the `torch.device` type your vendor's torch extension registers.
4. `device_stats()`: memory and utilisation figures, in accelctl's stats vocabulary.
5. `accelerator_info()`: description, priority, `torch.distributed` backend, aliases.
6. `environment_info()`: driver and runtime versions for `accelctl env` (bug reports).

## Devices

`devices=` accepts what every indexed accelerator accepts (accelctl's shared parser):
`"auto"` or `-1` (all visible), `k` (the first k), `"i,j"` or `[i, j]` (exactly those).
"""

MODULE = '''\
"""accelctl plugin for the $title accelerator.

Generated by ``accelctl new-plugin $name``. Every hook is written and documented; ``detect()``
says "not detected" until it is taught to find the hardware. Rules that apply to every hook:

- Importing this module must stay cheap: no ``import torch`` (nor the vendor's runtime) at module
  level; import them inside the hooks that need them (``accelctl list`` imports every plugin).
- A hook never raises on a machine without the hardware.

Check your work with ``accelctl validate $name`` (or ``pytest tests``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import accelctl

if TYPE_CHECKING:
    import torch

#: The accelerator's canonical name (the entry point's name in pyproject.toml).
NAME = "$name"
#: The ``torch.device`` type of this accelerator's devices: torch knows cpu, cuda, mps, xpu,
#: hpu, ... natively; a new type is registered by your vendor's torch extension on import.
DEVICE_TYPE = "$device_type"


@accelctl.hookimpl
def detect() -> bool:
    """True when this accelerator can run torch work in this process now.

    Answer in milliseconds (cache what is slow), never raise, and never create a device
    context that would break a later ``fork``. Say no cheaply first, before importing torch or
    the vendor's runtime, for example::

        if importlib.util.find_spec("vendor_runtime") is None:
            return False
        import vendor_runtime
        return vendor_runtime.device_count() > 0
    """
    return False


@accelctl.hookimpl
def unavailable_reason() -> str | None:
    """One line saying why :func:`detect` is False here (shown by ``accelctl list``)."""
    return f"the {NAME} plugin cannot find its hardware yet: detect() is still the generated stub"


@accelctl.hookimpl
def auto_device_count() -> int:
    """The devices visible to this process: 0 when not detected, at least 1 when detected.

    Honour your vendor's visible-devices variable (like ``CUDA_VISIBLE_DEVICES``). accelctl
    decides how many of them ``devices="auto"`` uses (all of them with a distributed backend,
    the first without).
    """
    if not detect():
        return 0
    return 0  # replace: count the visible devices


@accelctl.hookimpl
def parse_devices(devices: Any) -> list[int]:
    """Normalise a devices spec with the core's shared parser for indexed accelerators.

    It accepts ``"auto"``, ``-1``, ``k``, ``"k"``, ``"i,j"`` and ``[i, j]`` and raises
    ``accelctl.DeviceSpecError`` (with a message that teaches) for everything else.
    """
    return accelctl.parse_indexed_devices(devices, visible=auto_device_count(), accelerator=NAME)


@accelctl.hookimpl
def get_parallel_devices(devices: list[int]) -> list[torch.device]:
    """One ``torch.device`` per process, in rank order, for what :func:`parse_devices` returned."""
    import torch

    return [torch.device(DEVICE_TYPE, index) for index in devices]


@accelctl.hookimpl
def device_stats(device: torch.device) -> dict[str, int | float]:
    """Flat figures for one device, the unit in the key; ``{}`` where nothing can be read.

    Use the common keys where they exist (``memory_allocated_bytes``, ``memory_reserved_bytes``,
    ``memory_used_bytes``, ``memory_total_bytes``, ``utilization_percent``,
    ``temperature_celsius``, ``power_watts``) and prefix the others with ``"$name."``. Never
    sleep to sample, and never start a runtime that is not in use yet.
    """
    return {}


@accelctl.hookimpl
def accelerator_info() -> accelctl.AcceleratorInfo:
    """Description, family, priority, distributed backend and aliases.

    The available accelerator of highest priority wins ``accelerator="auto"`` (CPU 0, CUDA and
    MPS 100, a specialised accelerator 200). ``family="gpu"`` puts it under
    ``accelerator="gpu"``. ``distributed_backend`` is the ``torch.distributed`` backend for
    several processes; None allows one process only.
    """
    return accelctl.AcceleratorInfo(
        description="$title accelerator",
        family=None,
        priority=200,
        distributed_backend=None,
        aliases=(),
    )


@accelctl.hookimpl
def setup_device(device: torch.device) -> None:
    """Make ``device`` this process's current device (called once per process, before the
    model moves); nothing to do for accelerators without a "current device"."""


@accelctl.hookimpl
def teardown() -> None:
    """Release what the accelerator holds in this process (called at the end of training)."""


@accelctl.hookimpl
def environment_info() -> dict[str, str | int | float | bool | None]:
    """Facts for ``accelctl env`` (a bug report's block): the driver's and runtime's versions
    (None when unknown), your visible-devices variable when it is set. Import no torch and start
    no device runtime here."""
    return {}
'''

TEST = '''\
"""accelctl's conformance suite on this plugin: one pytest test per check.

The same checks as ``accelctl validate $name``; the ones that need the hardware skip (saying
why) on a machine without it.
"""

import accelctl.testing


class TestConformance(accelctl.testing.AcceleratorConformance):
    accelerator = "$name"
'''

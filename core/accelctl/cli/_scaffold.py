"""``accelctl new-plugin``: a ready plugin package for a new accelerator.

From the templates in ``accelctl/templates/new_plugin`` (``string.Template``). As generated it
passes ``accelctl validate``, ``detect()`` saying "not detected" until its author teaches it the
hardware."""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template

from .._base.project import RESERVED_NAMES
from .._contract.info import is_valid_name

#: The package's files, as templates (shipped as package data beside the code).
TEMPLATES = Path(__file__).parents[1] / "templates" / "new_plugin"


@dataclass(frozen=True)
class PluginNames:
    """The names of a new plugin package, derived from the accelerator's canonical name."""

    name: str
    #: The pip distribution, ``accelctl-<name>``.
    distribution: str
    #: The import package, ``accelctl_<name>`` (``-`` becomes ``_``).
    module: str
    #: The ``torch.device`` type: the name as an identifier (``my-chip`` gives ``my_chip``), the
    #: generated class's ``device_type``, so that ``accelerator_info()`` and ``accelctl stats``
    #: name devices by it.
    device_type: str
    #: The plugin class, ``accelctl.Accelerator``'s subclass: ``NPUAccelerator``,
    #: ``MyChipAccelerator`` (short names read as acronyms, longer ones as words).
    class_name: str

    @classmethod
    def for_name(cls, name: str) -> PluginNames:
        """Derive the names; :func:`name_problem` must have accepted ``name``."""
        identifier = re.sub(r"[^a-z0-9_]", "_", name)
        words = [part for part in identifier.split("_") if part]
        title = "".join(word.upper() if len(name) <= 4 else word.capitalize() for word in words)
        return cls(
            name=name,
            distribution=f"accelctl-{name}",
            module=f"accelctl_{identifier}",
            device_type=identifier,
            class_name=f"{title}Accelerator",
        )

    def substitutions(self) -> dict[str, str]:
        """The values of the templates' placeholders: the names, and the title."""
        return {**asdict(self), "title": self.name.upper() if len(self.name) <= 4 else self.name}


#: The longest name ``new-plugin`` accepts: it names a distribution, a module and files.
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
        "pyproject.toml": "pyproject.toml.txt",
        "README.md": "README.md",
        f"src/{names.module}/__init__.py": "module.py.txt",
        f"src/{names.module}/py.typed": None,
        f"tests/test_{names.module}_conformance.py": "test_conformance.py.txt",
    }
    return {
        path: "" if name is None else Template(_template(name)).substitute(values)
        for path, name in files.items()
    }


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


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

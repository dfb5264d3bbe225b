"""Installed distributions written by hand, as ``pip install`` leaves them, for tests.

A ``.dist-info`` folder and the modules beside it, for tests that would otherwise mock
``importlib.metadata``: put the folder on ``sys.path`` and give it to
:class:`accelctl.testing.Registry` or :func:`installed_plugins`."""

from __future__ import annotations

import contextlib
import re
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

from accelctl._base.project import ENTRY_POINT_GROUP
from accelctl._host.registry import Registry, set_registry


def write_distribution(
    root: Path,
    distribution: str,
    entry_points: Mapping[str, str] | None = None,
    *,
    version: str = "1.0",
    group: str = ENTRY_POINT_GROUP,
    modules: Mapping[str, str] | None = None,
    files: Mapping[str, str | bytes] | None = None,
    record: bool = False,
) -> Path:
    """Install ``distribution`` into the folder ``root`` (created if needed).

    :param entry_points: name -> ``"module:attr"`` in ``group`` (default: accelctl's group).
    :param modules: module name -> source (dedented), written as ``root/<module>.py``.
    :param files: dist-info files written exactly as given (``str`` or ``bytes``), replacing the
        generated ``METADATA`` / ``entry_points.txt``: a malformed file, a non-UTF-8 one...
    :param record: also write a ``RECORD`` listing what was written, as pip does.
    :returns: the ``.dist-info`` folder.
    :raises FileExistsError: the distribution is installed in ``root`` already.
    """
    # The folder name pip gives a distribution's metadata: accelctl_npu-1.0.dist-info.
    info = root / f"{re.sub(r'[-_.]+', '_', distribution)}-{version}.dist-info"
    info.mkdir(parents=True)
    generated: dict[str, str | bytes] = {
        "METADATA": f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    }
    if entry_points is not None:
        lines = [f"[{group}]"] + [f"{name} = {value}" for name, value in entry_points.items()]
        generated["entry_points.txt"] = "\n".join(lines) + "\n"
    generated.update(files or {})
    for filename, content in generated.items():
        data = content.encode() if isinstance(content, str) else content
        (info / filename).write_bytes(data)
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    if record:
        listed = [f"{module}.py" for module in modules or {}]
        listed += [f"{info.name}/{filename}" for filename in [*generated, "RECORD"]]
        (info / "RECORD").write_text("".join(f"{path},,\n" for path in listed))
    return info


@contextlib.contextmanager
def installed_plugins(*paths: str | Path) -> Iterator[Registry]:
    """Make the process-wide registry the one over ``paths`` only, for the duration.

    The process-wide registry is the CLI's, :func:`accelctl.resolve`'s, the Trainer's. Yields
    it."""
    registry = Registry(path=[str(path) for path in paths])
    previous = set_registry(registry)
    try:
        yield registry
    finally:
        set_registry(previous)


def reset_registry() -> None:
    """Forget the process-wide registry, so that the next lookup scans the entry points again.

    In a long-lived process that has just ``pip install``\\ ed a plugin, say."""
    set_registry(None)

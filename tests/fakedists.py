"""Real installed distributions for tests: ``*.dist-info`` folders and modules on a path.

Discovery tests use these instead of mocking ``importlib.metadata``: a folder made here is what
``pip install`` leaves in site-packages (METADATA, entry_points.txt, the plugin's module), written
by :func:`accelctl.testing.write_distribution`, the one builder the benchmark uses too.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from accelctl.testing import write_distribution


class FakeSite:
    """A site-packages-like folder on which fake distributions are installed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.modules: list[str] = []

    @property
    def path(self) -> list[str]:
        return [str(self.root)]

    def install(
        self,
        distribution: str,
        entry_points: Mapping[str, str],
        modules: Mapping[str, str] | None = None,
        version: str = "1.0",
        group: str = "accelctl.accelerators",
    ) -> Path:
        """Install ``distribution`` with ``entry_points`` (name -> "module:attr") in ``group``
        and ``modules`` (module name -> source, dedented)."""
        info = write_distribution(
            self.root, distribution, entry_points, version=version, group=group, modules=modules
        )
        self.modules.extend(modules or {})
        return info

    def copy_installed(self, distribution: str) -> bool:
        """Copy what discovery reads of an installed distribution (its METADATA and
        entry_points.txt) onto this site, so a registry over this site sees it; its modules stay
        importable from where they are installed. False when it is not installed."""
        from importlib import metadata

        try:
            dist = metadata.distribution(distribution)
        except metadata.PackageNotFoundError:
            return False
        folder = re.sub(r"[-_.]+", "_", distribution)
        info = self.root / f"{folder}-{dist.version}.dist-info"
        info.mkdir()
        for name in ("METADATA", "entry_points.txt"):
            text = dist.read_text(name)
            if text is not None:
                (info / name).write_text(text)
        return True

    def install_raw(
        self,
        distribution: str,
        files: Mapping[str, str | bytes],
        modules: Mapping[str, str] | None = None,
        version: str = "1.0",
    ) -> Path:
        """Install ``distribution`` with its dist-info files written exactly as given (``str`` or
        ``bytes``): a malformed ``entry_points.txt``, a ``METADATA`` that is not UTF-8... A
        ``METADATA`` is written for it unless ``files`` has one."""
        info = write_distribution(
            self.root, distribution, version=version, modules=modules, files=files
        )
        self.modules.extend(modules or {})
        return info

    def forget_modules(self) -> None:
        """Drop the fake modules from ``sys.modules`` so the next test imports them afresh."""
        for module in self.modules:
            sys.modules.pop(module, None)


GOOD_PLUGIN = """
    import accelctl

    @accelctl.hookimpl
    def detect():
        return True

    @accelctl.hookimpl
    def auto_device_count():
        return 2

    @accelctl.hookimpl
    def parse_devices(devices):
        return accelctl.parse_indexed_devices(devices, visible=2, accelerator="{name}")

    @accelctl.hookimpl
    def get_parallel_devices(devices):
        import torch
        return [torch.device("cpu") for _ in devices]

    @accelctl.hookimpl
    def device_stats(device):
        return {{"memory_used_bytes": 1}}

    @accelctl.hookimpl
    def accelerator_info():
        return {{"description": "{name} test accelerator", "priority": {priority},
                "family": {family!r}, "distributed_backend": "gloo", "aliases": {aliases!r}}}
"""

UNDETECTED_PLUGIN = """
    import accelctl

    @accelctl.hookimpl
    def detect():
        return False

    @accelctl.hookimpl
    def unavailable_reason():
        return "no {name} hardware here"

    @accelctl.hookimpl
    def auto_device_count():
        return 0

    @accelctl.hookimpl
    def parse_devices(devices):
        return accelctl.parse_indexed_devices(devices, visible=0, accelerator="{name}")

    @accelctl.hookimpl
    def get_parallel_devices(devices):
        import torch
        return [torch.device("cpu") for _ in devices]

    @accelctl.hookimpl
    def device_stats(device):
        return {{}}

    @accelctl.hookimpl
    def accelerator_info():
        return {{"family": {family!r}, "priority": {priority}, "aliases": {aliases!r}}}
"""


def good_plugin(
    name: str, priority: int = 10, family: str | None = None, aliases: tuple[str, ...] = ()
) -> str:
    """Source of a working module plugin that detects two devices."""
    return GOOD_PLUGIN.format(name=name, priority=priority, family=family, aliases=aliases)


def undetected_plugin(
    name: str, priority: int = 100, family: str | None = "gpu", aliases: tuple[str, ...] = ()
) -> str:
    """Source of a working module plugin whose hardware is absent."""
    return UNDETECTED_PLUGIN.format(name=name, priority=priority, family=family, aliases=aliases)


#: A module for the fake site that holds what hooks of :func:`waiting_plugin` wait on.
GATE_MODULE = """
    import threading

    #: Set by the test when it ends, so that a hook left waiting past its deadline returns.
    OPEN = threading.Event()
"""


def waiting_plugin(name: str, hook: str, wait: str = "gate.OPEN.wait()", priority: int = 10) -> str:
    """Source of :func:`good_plugin` whose ``hook`` first runs ``wait`` (a statement using the
    module ``gate``, which the fake site must hold: :data:`GATE_MODULE`); by default it waits
    until the test opens the gate, that is, past any deadline."""
    source = good_plugin(name, priority)
    marker = f"    def {hook}("
    head, found, tail = source.partition(marker)
    assert found, f"good_plugin has no hook {hook}"
    signature, newline, body = tail.partition("\n")
    return "    import gate\n" + head + found + signature + newline + f"        {wait}\n" + body


INDEXED_PLUGIN = """
    import accelctl

    @accelctl.hookimpl
    def detect():
        return {visible} > 0

    @accelctl.hookimpl
    def auto_device_count():
        return {visible}

    @accelctl.hookimpl
    def parse_devices(devices):
        return accelctl.parse_indexed_devices(devices, visible={visible}, accelerator={name!r})

    @accelctl.hookimpl
    def get_parallel_devices(devices):
        import torch
        return [torch.device({device_type!r}, i) for i in devices]

    @accelctl.hookimpl
    def device_stats(device):
        return {stats!r}

    @accelctl.hookimpl
    def accelerator_info():
        return {info!r}
"""


def indexed_plugin(
    name: str,
    *,
    visible: int = 2,
    device_type: str = "cpu",
    info: dict[str, object] | None = None,
    stats: dict[str, int | float] | None = None,
    extra: str = "",
) -> str:
    """Source of a module plugin with ``visible`` indexed devices of ``device_type`` (detected
    when there is at least one), the shared parser, ``info`` as its ``accelerator_info()`` and
    ``stats`` as its figures. ``extra`` is appended: a hook defined again there replaces the
    generated one (the later function of a module is the one registered)."""
    source = INDEXED_PLUGIN.format(
        name=name, visible=visible, device_type=device_type, info=info or {}, stats=stats or {}
    )
    return textwrap.dedent(source) + textwrap.dedent(extra)

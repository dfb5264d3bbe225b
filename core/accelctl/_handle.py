"""A typed handle on one accelerator plugin: a method per hook, every call checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._accelerator import Accelerator
from ._hookcall import call_hook
from ._info import AcceleratorInfo
from ._loading import LoadedPlugin, PluginOrigin, load_object

if TYPE_CHECKING:
    import torch


class AcceleratorHandle:
    """One loaded accelerator plugin, as callers see it.

    Obtained from :func:`accelctl.get_accelerator`, :func:`accelctl.resolve` or
    :meth:`from_object`. Each method calls the plugin's hook of the same name through
    :func:`accelctl._hookcall.call_hook`, so a misbehaving plugin surfaces as a
    :class:`~accelctl._errors.PluginHookError` that names it.
    """

    def __init__(self, loaded: LoadedPlugin) -> None:
        self._loaded = loaded
        self._info: AcceleratorInfo | None = None

    @classmethod
    def from_object(cls, obj: object, name: str | None = None) -> AcceleratorHandle:
        """A handle on a plugin object that has no entry point: an :class:`Accelerator`
        instance, an instance or module with ``@accelctl.hookimpl`` functions, or a class."""
        if isinstance(obj, cls):
            return obj
        if name is None:
            if isinstance(obj, Accelerator):
                name = obj.accelerator_name
            else:
                name = str(
                    getattr(obj, "name", "") or getattr(obj, "__name__", "") or type(obj).__name__
                ).lower()
        return cls(load_object(obj, PluginOrigin(name=name)))

    # -- identity ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The canonical name (the entry point's name)."""
        return self._loaded.origin.name

    @property
    def distribution(self) -> str | None:
        """The distribution that installed the plugin; None for an object passed in directly."""
        return self._loaded.origin.distribution

    @property
    def version(self) -> str | None:
        """That distribution's version."""
        return self._loaded.origin.version

    @property
    def entry_point(self) -> str | None:
        """The entry point's value (``"module:attr"``), None for an object passed in directly."""
        return self._loaded.origin.entry_point

    @property
    def plugin(self) -> object:
        """The plugin object itself (module, or instance)."""
        return self._loaded.plugin

    @property
    def loaded(self) -> LoadedPlugin:
        """The registered plugin behind the handle (for the conformance checks)."""
        return self._loaded

    @property
    def info(self) -> AcceleratorInfo:
        """The plugin's :class:`AcceleratorInfo` (defaults when it has no ``accelerator_info``),
        read once."""
        # Not functools.cached_property: up to Python 3.11 it holds one lock for every instance,
        # so a plugin whose accelerator_info() hangs would stall the others' (listed concurrently).
        if self._info is None:
            self._info = self.accelerator_info()
        return self._info

    def implements(self, hook: str) -> bool:
        """True when the plugin implements ``hook`` (optional hooks may be absent)."""
        return self._loaded.implements(hook)

    def __repr__(self) -> str:
        return f"<AcceleratorHandle {self._loaded.origin.describe()}>"

    # -- hooks ------------------------------------------------------------------------------

    def _call(self, hook: str, **kwargs: Any) -> Any:
        return call_hook(self._loaded, hook, **kwargs)

    def detect(self) -> bool:
        """True when the accelerator can run torch work here now."""
        return bool(self._call("detect"))

    def auto_device_count(self) -> int:
        """Devices used for ``devices="auto"``; 0 when not detected."""
        return int(self._call("auto_device_count"))

    def parse_devices(self, devices: Any) -> int | list[int]:
        """Normalise a devices spec; raises :class:`~accelctl.DeviceSpecError` for bad ones."""
        result: int | list[int] = self._call("parse_devices", devices=devices)
        return result

    def get_parallel_devices(self, devices: Any) -> list[torch.device]:
        """One ``torch.device`` per process for what :meth:`parse_devices` returned."""
        # torch is imported here, before the hook's deadline starts: its first import can take
        # seconds on a loaded machine and is not the plugin's time.
        import torch  # noqa: F401

        result: list[torch.device] = self._call("get_parallel_devices", devices=devices)
        return result

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Flat figures for one device, given as a ``torch.device`` or as its string form
        (``"cuda:0"``), passed to the plugin as it is: no torch import here."""
        result: dict[str, int | float] = self._call("device_stats", device=device)
        return result

    def unavailable_reason(self) -> str | None:
        """Why the accelerator is not available here, when the plugin says."""
        if not self.implements("unavailable_reason"):
            return None
        result: str | None = self._call("unavailable_reason")
        return result

    def accelerator_info(self) -> AcceleratorInfo:
        """Call the ``accelerator_info`` hook (uncached; see :attr:`info`)."""
        if not self.implements("accelerator_info"):
            return AcceleratorInfo()
        result: AcceleratorInfo = self._call("accelerator_info")
        return result

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current in this process (no-op when the plugin has no such hook)."""
        if self.implements("setup_device"):
            self._call("setup_device", device=device)

    def teardown(self) -> None:
        """Release what the accelerator holds (no-op when the plugin has no such hook)."""
        if self.implements("teardown"):
            self._call("teardown")

    def environment_info(self) -> dict[str, str | int | float | bool | None]:
        """The plugin's facts for ``accelctl env`` (``{}`` when it has no such hook)."""
        if not self.implements("environment_info"):
            return {}
        result: dict[str, str | int | float | bool | None] = self._call("environment_info")
        return result

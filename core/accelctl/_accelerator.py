"""Class-based plugins: subclass :class:`Accelerator`, no hook markers needed."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

from ._info import AcceleratorInfo

if TYPE_CHECKING:
    import torch


class Accelerator(abc.ABC):
    """Base class of class-based accelerator plugins: methods named after hooks *are* its hooks.
    Only :meth:`detect` and :meth:`auto_device_count` must be written; the other defaults fit an
    indexed accelerator whose ``torch.device`` type is :attr:`device_type`:

    .. code-block:: python

        class HPUAccelerator(accelctl.Accelerator):
            name = "hpu"
            description = "Intel Gaudi (Habana) HPU"
            priority = 200
            distributed_backend = "hccl"

            def detect(self) -> bool: ...
            def auto_device_count(self) -> int: ...

    Register it with an entry point (``hpu = "accelctl_hpu:HPUAccelerator"``), or pass an
    instance straight to ``accelctl.resolve()`` or ``accelctl.Trainer(accelerator=...)``.
    """

    #: Canonical name; the entry point's name wins when the class is installed as a plugin.
    name: ClassVar[str] = ""
    #: ``torch.device`` type of the default :meth:`get_parallel_devices` (default: :attr:`name`).
    device_type: ClassVar[str] = ""
    description: ClassVar[str] = ""
    family: ClassVar[str | None] = None
    priority: ClassVar[int] = 0
    distributed_backend: ClassVar[str | None] = None
    aliases: ClassVar[tuple[str, ...]] = ()

    #: The entry point's name, set by accelctl when the plugin is loaded from one.
    _entry_point_name: str | None = None

    @property
    def accelerator_name(self) -> str:
        """The accelerator's name in messages: the entry point's name, else :attr:`name`, else the
        class name without "Accelerator"."""
        return (
            self._entry_point_name
            or self.name
            or type(self).__name__.removesuffix("Accelerator").lower()
            or "custom"
        )

    def bind_entry_point(self, name: str) -> None:
        """Record the entry point's name, which is the canonical name (called by the loader)."""
        self._entry_point_name = name

    @abc.abstractmethod
    def detect(self) -> bool:
        """See :func:`accelctl.hookspecs.detect`."""

    @abc.abstractmethod
    def auto_device_count(self) -> int:
        """See :func:`accelctl.hookspecs.auto_device_count`."""

    def parse_devices(self, devices: Any) -> int | list[int]:
        """Default: the core's indexed parser over :meth:`auto_device_count` visible devices."""
        from ._devices import parse_indexed_devices  # parsing only: not on `list`'s path

        return parse_indexed_devices(
            devices, visible=self.auto_device_count(), accelerator=self.accelerator_name
        )

    def get_parallel_devices(self, devices: Any) -> list[torch.device]:
        """Default: ``torch.device(device_type, i)`` for each index (or ``range(count)``)."""
        import torch

        device_type = self.device_type or self.name
        if not device_type:
            raise TypeError(
                f"{type(self).__name__} declares neither device_type nor name, so the default "
                f"get_parallel_devices cannot tell which torch.device to build; set the class "
                f'attribute device_type (for example device_type = "hpu")'
            )
        indices = range(devices) if isinstance(devices, int) else devices
        return [torch.device(device_type, index) for index in indices]

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Default: nothing can be read (``device``: a ``torch.device`` or ``"<type>:<i>"``)."""
        return {}

    def accelerator_info(self) -> AcceleratorInfo:
        """Default: built from the class attributes."""
        return AcceleratorInfo(
            description=self.description,
            family=self.family,
            priority=self.priority,
            distributed_backend=self.distributed_backend,
            aliases=tuple(self.aliases),
            device_type=self.device_type or None,
        )

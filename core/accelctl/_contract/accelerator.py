"""Class-based plugins: subclass :class:`Accelerator`, no hook markers needed."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .info import AcceleratorInfo
from .kernel_gaps import KernelGaps
from .peak import DevicePeak

if TYPE_CHECKING:
    import torch

    from .._base.torch_build import TorchBuild


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

    Besides the hooks, the class offers what plugins otherwise write alike (none of it is a hook,
    and accelctl never calls it): :meth:`installed_torch` and :attr:`TORCH_MISSING` (torch's build
    read without importing it), :meth:`environment_variables` and :meth:`describe_variables` (the
    visible-device variables that are set, for ``environment_info()`` and for reasons), and
    :meth:`torch_device_in_use` (whether this process already uses a device runtime).
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

    #: The ``unavailable_reason()`` of an accelerator that needs torch where
    #: :meth:`installed_torch` finds none.
    TORCH_MISSING: ClassVar[str] = "torch is not installed (pip install torch)"

    #: The entry point's name, set by accelctl when the plugin is loaded from one.
    _entry_point_name: str | None = None

    @property
    def accelerator_name(self) -> str:
        """Return the accelerator's name as messages show it.

        The entry point's name, else :attr:`name`, else the class name without "Accelerator"."""
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
        from .device_specs import parse_indexed_devices  # parsing only: not on `list`'s path

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

    def device_peak(self, device: torch.device | str) -> DevicePeak | None:
        """Return the device's peak: unknown (None) by default.

        Without a peak the Trainer logs no ``mfu``; see :func:`accelctl.hookspecs.device_peak`."""
        return None

    def kernel_gaps(self) -> KernelGaps | None:
        """Default: nothing declared (None); see :func:`accelctl.hookspecs.kernel_gaps`."""
        return None

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

    # -- helpers for subclasses: not hooks (accelctl never calls them) ---------------------------

    @staticmethod
    def installed_torch() -> TorchBuild | None:
        """Return the installed torch's version and build, read without importing torch.

        The build is CUDA, ROCm, XPU or CPU-only, read from ``torch/version.py`` where torch is not
        imported yet (:func:`accelctl.torch_build.read_torch_build`); None where torch is not
        installed, and where its install is too broken to read, so that ``detect()`` says no instead
        of raising (give :attr:`TORCH_MISSING` as the reason)."""
        from .._base.torch_build import (
            read_torch_build,  # not on the path of a plugin that never asks
        )

        try:
            return read_torch_build()
        except Exception:  # a broken install: "not installed" rather than a detect() that raises
            return None

    @staticmethod
    def environment_variables(
        names: Iterable[str], environ: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """Return the set variables of ``names`` with their values, in the order of ``names``.

        Read from ``environ``, default ``os.environ``: what ``environment_info()`` reports of the
        variables that choose an accelerator's devices (``CUDA_VISIBLE_DEVICES``, ...)."""
        environ = os.environ if environ is None else environ
        return {name: environ[name] for name in names if name in environ}

    @classmethod
    def describe_variables(
        cls, names: Iterable[str], environ: Mapping[str, str] | None = None
    ) -> str:
        """Describe the set variables of ``names`` as a reason names them.

        ``"CUDA_VISIBLE_DEVICES='', HIP_VISIBLE_DEVICES='1'"``; ``""`` when none is set."""
        found = cls.environment_variables(names, environ)
        return ", ".join(f"{name}={value!r}" for name, value in found.items())

    @staticmethod
    def once_per_environment(names: Sequence[str], look: Callable[[], T]) -> PerEnvironment[T]:
        """Wrap ``look`` so that it runs once per setting of the environment variables ``names``.

        The variables ``names`` are the ones ``look`` reads: a change to one of them is a new look.
        Each answer is kept for the process; the wrapper's ``forget()`` looks again next time
        (tests, a driver installed meanwhile). For a probe of the machine that ``detect``,
        ``auto_device_count`` and ``unavailable_reason`` all ask."""
        return PerEnvironment(names, look)

    @staticmethod
    def torch_device_in_use(device_type: str) -> bool:
        """Say whether this process already uses torch's ``device_type`` runtime.

        True when torch is imported (and not still being imported by another thread) and
        ``torch.<device_type>.is_initialized()`` says so. Never imports torch nor starts anything,
        so ``device_stats()`` and ``teardown()`` may ask it first and read the allocator only then;
        a device module that cannot tell counts as not in use."""
        from .._base.torch_build import loaded_torch

        module = getattr(loaded_torch(), device_type, None)
        is_initialized = getattr(module, "is_initialized", None)
        return callable(is_initialized) and bool(is_initialized())


T = TypeVar("T")


class PerEnvironment(Generic[T]):
    """A look made once per setting of some environment variables.

    See :meth:`Accelerator.once_per_environment`."""

    def __init__(self, names: Sequence[str], look: Callable[[], T]) -> None:
        self.names, self.look = tuple(names), look
        self._answers: dict[tuple[str | None, ...], T] = {}

    def __call__(self) -> T:
        """The look's answer for the variables' current setting, looked at once."""
        key = tuple(os.environ.get(name) for name in self.names)
        if key not in self._answers:
            self._answers[key] = self.look()
        return self._answers[key]

    def forget(self) -> None:
        """Look again at the next call."""
        self._answers.clear()

"""Lightning's ``Trainer`` (and ``Fabric``) on any accelctl accelerator.

Two ways, both backed by the accelctl plugin's hooks::

    import lightning
    from accelctl.integrations.lightning import LightningAccelerator, register_all

    # 1. an instance: works for every accelerator, "hpu" included
    trainer = lightning.Trainer(accelerator=LightningAccelerator("npu"), devices=2)

    # 2. by name, after registering every installed accelctl accelerator with Lightning
    register_all()
    trainer = lightning.Trainer(accelerator="npu", devices=2)

Why one class per plugin: Lightning calls ``parse_devices``, ``get_parallel_devices`` and
``is_available`` on the accelerator's *class* (``type(accelerator).parse_devices(...)``), and its
registry builds accelerators with no arguments, so plugin state cannot live on an instance.
``LightningAccelerator("npu")`` therefore returns an instance of a subclass bound to the ``npu``
plugin's :class:`~accelctl.AcceleratorHandle` (one subclass per handle, made once), whose
class methods delegate to the handle. That subclass is what :func:`register_all` registers.

What Lightning still decides itself (strategy, DDP backend, mixed precision) is described in
``docs/lightning.md``; :meth:`LightningAccelerator.setup_device` and
:meth:`LightningAccelerator.setup` turn the cases it gets wrong for a non-CPU accelerator into
a clear error or warning.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

try:
    from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as FABRIC_REGISTRY
    from lightning.fabric.accelerators.registry import _AcceleratorRegistry
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.accelerators import Accelerator as _LightningAcceleratorBase
    from lightning.pytorch.accelerators import AcceleratorRegistry as TRAINER_REGISTRY
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without Lightning
    raise ModuleNotFoundError(
        f"accelctl.integrations.lightning needs Lightning ({exc.name} is missing): "
        "pip install 'accelctl[lightning]'",
        name=exc.name,
    ) from exc

from ..accelerator import Accelerator as _AccelctlAccelerator
from ..errors import AccelctlError, PluginHookError, PluginWarning
from ..handle import AcceleratorHandle
from ..registry import Registry, get_accelerator, get_registry

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["LightningAccelerator", "Registration", "register_all"]

#: What ``LightningAccelerator(...)`` accepts, for messages.
_ACCEPTED = (
    "an accelerator name (LightningAccelerator('cpu')), an accelctl.AcceleratorHandle "
    "(accelctl.get_accelerator('cpu')), or an accelctl.Accelerator subclass or instance"
)

#: One bound subclass per handle, so that repeated calls give the same class.
_BOUND: dict[AcceleratorHandle, type[LightningAccelerator]] = {}


def _to_handle(name_or_handle: object) -> AcceleratorHandle:
    if isinstance(name_or_handle, AcceleratorHandle):
        return name_or_handle
    if isinstance(name_or_handle, str):
        return get_accelerator(name_or_handle)
    if isinstance(name_or_handle, _AccelctlAccelerator) or (
        isinstance(name_or_handle, type) and issubclass(name_or_handle, _AccelctlAccelerator)
    ):
        return AcceleratorHandle.from_object(name_or_handle)
    raise TypeError(
        f"LightningAccelerator({name_or_handle!r}): expected {_ACCEPTED}, "
        f"not {type(name_or_handle).__name__}"
    )


def _rebuild(spec: object) -> LightningAccelerator:
    """Unpickle (``ddp_spawn`` children): look the plugin up again in this process."""
    return LightningAccelerator(spec)


class LightningAccelerator(_LightningAcceleratorBase):
    """A Lightning ``Accelerator`` whose every method calls an accelctl plugin's hook.

    ``LightningAccelerator(name_or_handle)`` takes an accelerator name (any case, aliases
    included), an :class:`~accelctl.AcceleratorHandle`, or an :class:`accelctl.Accelerator`
    subclass or instance (no entry point needed), and returns an instance of the subclass bound
    to that plugin (see the module's docstring for why). ``isinstance(x, LightningAccelerator)``
    holds for all of them.

    ==========================  =======================================
    Lightning calls             accelctl hook
    ==========================  =======================================
    ``is_available()``          ``detect()``
    ``auto_device_count()``     ``auto_device_count()``
    ``parse_devices(d)``        ``parse_devices(d)``
    ``get_parallel_devices(d)`` ``get_parallel_devices(d)``
    ``setup_device(device)``    ``setup_device(device)``
    ``get_device_stats(dev)``   ``device_stats(dev)``
    ``teardown()``              ``teardown()``
    ``name()``                  the accelerator's canonical name
    ==========================  =======================================

    :raises accelctl.UnknownAcceleratorError: no installed plugin has that name.
    :raises accelctl.PluginLoadError: the plugin failed to load.
    :raises TypeError: for anything else than the accepted forms.
    """

    #: The plugin this class is bound to; None on ``LightningAccelerator`` itself.
    _handle: ClassVar[AcceleratorHandle | None] = None

    def __new__(cls, name_or_handle: object = None) -> LightningAccelerator:
        if cls._handle is None:
            if name_or_handle is None:
                raise TypeError(f"LightningAccelerator() needs the accelerator: {_ACCEPTED}")
            return super().__new__(cls.bind(name_or_handle))
        if name_or_handle is not None and _to_handle(name_or_handle) is not cls._handle:
            raise TypeError(
                f"{cls.__qualname__} is bound to accelerator {cls._handle.name!r}; "
                f"use LightningAccelerator({name_or_handle!r}) for another one"
            )
        return super().__new__(cls)

    def __init__(self, name_or_handle: object = None) -> None:
        # ``__new__`` did the work; the argument is accepted here only because Python passes it.
        super().__init__()

    @classmethod
    def bind(cls, name_or_handle: object) -> type[LightningAccelerator]:
        """The subclass bound to one accelctl plugin (made on first use, then reused).

        This is the class :func:`register_all` gives Lightning's registry; instantiate it with
        no arguments.
        """
        handle = _to_handle(name_or_handle)
        bound = _BOUND.get(handle)
        if bound is None:
            bound = type(
                f"LightningAccelerator[{handle.name}]",
                (LightningAccelerator,),
                {"_handle": handle, "__module__": __name__, "__doc__": cls.__doc__},
            )
            _BOUND[handle] = bound
        return bound

    @classmethod
    def accelctl_handle(cls) -> AcceleratorHandle:
        """The accelctl plugin behind this class."""
        if cls._handle is None:
            raise TypeError(
                "LightningAccelerator itself is not bound to a plugin; call its methods on "
                "LightningAccelerator('<name>') or LightningAccelerator.bind('<name>') "
                f"({_ACCEPTED})"
            )
        return cls._handle

    def __reduce__(self) -> tuple[Any, tuple[object]]:
        # The bound class is made at run time, so pickle (ddp_spawn) by what rebuilds it: the
        # name for an installed plugin, the plugin object itself for one passed in directly.
        handle = self.accelctl_handle()
        spec = handle.name if handle.entry_point is not None else handle.plugin
        return (_rebuild, (spec,))

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self.accelctl_handle()!r}>"

    # -- Lightning's class-level API ----------------------------------------------------------
    # Static methods in Lightning's base class, class methods here: Lightning calls them on the
    # class, which carries the handle.

    @classmethod
    def name(cls) -> str:
        """The accelctl accelerator's canonical name."""
        return cls.accelctl_handle().name

    @classmethod
    def is_available(cls) -> bool:
        """The plugin's ``detect()``. A plugin whose hook breaks is reported as a
        :class:`~accelctl.PluginWarning` and counts as unavailable: Lightning asks every
        registered accelerator when it lists the available ones for an error message."""
        try:
            return cls.accelctl_handle().detect()
        except PluginHookError as exc:
            warnings.warn(f"{exc}; treating it as unavailable", PluginWarning, stacklevel=2)
            return False

    @classmethod
    def auto_device_count(cls) -> int:
        """The plugin's ``auto_device_count()``: what ``devices="auto"`` means."""
        return cls.accelctl_handle().auto_device_count()

    @classmethod
    def parse_devices(cls, devices: Any) -> int | list[int]:
        """The plugin's ``parse_devices``; a bad spec raises :class:`accelctl.DeviceSpecError`
        (a ``ValueError``) naming the accelerator, the spec and the accepted forms."""
        return cls.accelctl_handle().parse_devices(devices)

    @classmethod
    def get_parallel_devices(cls, devices: Any) -> list[torch.device]:
        """The plugin's ``get_parallel_devices``: one ``torch.device`` per process."""
        return cls.accelctl_handle().get_parallel_devices(devices)

    @classmethod
    def device_type(cls) -> str | None:
        """The ``torch.device`` type of this accelerator's devices (None when it has none here)."""
        try:
            return cls.get_parallel_devices(cls.parse_devices(1))[0].type
        except (AccelctlError, IndexError):
            return None

    # -- per-process API ----------------------------------------------------------------------

    def setup_device(self, device: torch.device) -> None:
        """The plugin's ``setup_device``, after checking Lightning picked one of its devices.

        Lightning's ``strategy="auto"`` with one device gives any accelerator it does not know
        the device ``cpu``; for an accelerator whose devices are not CPUs, that is refused here
        with the strategy to pass instead.
        """
        expected = type(self).device_type()
        if expected is not None and device.type != expected:
            name = self.name()
            raise MisconfigurationException(
                f"accelctl accelerator {name!r} was asked to set up device {str(device)!r}, but "
                f"its devices are {expected!r} devices. Lightning's strategy='auto' places a "
                f"single device on 'cpu' for accelerators it does not know; pass the device "
                f"yourself: Trainer(accelerator=..., strategy=lightning.pytorch.strategies."
                f"SingleDeviceStrategy(device='{expected}:0'))"
            )
        self.accelctl_handle().setup_device(device)

    def setup(self, trainer: pl.Trainer) -> None:
        """Called by the strategy in each process before the model is moved, wrapped and given
        its optimizers. Does what Lightning does by accelerator type for its own CPU
        accelerator only (un-share CPU weights that ``ddp_spawn`` put in shared memory), and
        warns where Lightning chose by device type something else than the plugin says: the DDP
        process-group backend, and the device type of mixed-precision autocast."""
        from lightning.pytorch.plugins.precision import MixedPrecision
        from lightning.pytorch.strategies import DDPStrategy

        name = self.name()
        expected = type(self).device_type()
        backend = self.accelctl_handle().info.distributed_backend
        strategy = trainer.strategy
        module = trainer.lightning_module
        if module is not None and strategy.root_device.type == "cpu" and trainer.world_size > 1:
            _unshare_module_memory(module)
        if isinstance(strategy, DDPStrategy) and backend and strategy.process_group_backend:
            if strategy.process_group_backend != backend:
                warnings.warn(
                    f"accelctl accelerator {name!r} runs several processes over {backend!r}, but "
                    f"Lightning chose {strategy.process_group_backend!r}; pass "
                    f"strategy=DDPStrategy(process_group_backend={backend!r})",
                    UserWarning,
                    stacklevel=2,
                )
        precision = strategy.precision_plugin
        if isinstance(precision, MixedPrecision) and expected and precision.device != expected:
            warnings.warn(
                f"precision={precision.precision!r} autocasts on {precision.device!r}, but "
                f"accelctl accelerator {name!r} runs on {expected!r} devices, so autocast has no "
                f"effect there; pass plugins=[MixedPrecision({precision.precision!r}, "
                f"device={expected!r})] instead of precision=",
                UserWarning,
                stacklevel=2,
            )

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The plugin's ``device_stats`` (flat figures, units in the keys); an int is an index of
        this accelerator's device type."""
        if isinstance(device, bool):
            raise TypeError(f"device must be a torch.device, a str or an int index, not {device!r}")
        if isinstance(device, int):
            device_type = type(self).device_type()
            if device_type is None:
                raise ValueError(
                    f"device index {device} given, but accelctl accelerator {self.name()!r} "
                    "has no devices here"
                )
            device = torch.device(device_type, device)
        return dict(self.accelctl_handle().device_stats(device))

    def teardown(self) -> None:
        """The plugin's ``teardown()``."""
        self.accelctl_handle().teardown()

    @classmethod
    def register_accelerators(cls, accelerator_registry: _AcceleratorRegistry) -> None:
        """Register this bound class in ``accelerator_registry`` under the plugin's name."""
        handle = cls.accelctl_handle()
        accelerator_registry.register(
            handle.name,
            cls,
            description=_description(handle),
            override=True,
        )


def _unshare_module_memory(module: torch.nn.Module) -> None:
    # torch.multiprocessing.spawn moves every tensor it passes to shared memory; CPU replicas
    # would then all step the same weights. Lightning copies them for its CPUAccelerator only.
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if tensor.untyped_storage().is_shared():
                tensor.data = tensor.data.clone()


def _description(handle: AcceleratorHandle) -> str:
    try:
        text = handle.info.description
    except AccelctlError:
        text = ""
    source = f"{handle.distribution} {handle.version}" if handle.distribution else "accelctl"
    return f"{text or handle.name} (accelctl plugin, {source})"


@dataclass
class Registration:
    """What :func:`register_all` did, as plain data.

    - ``registered``: names now served by accelctl in Lightning's registries;
    - ``skipped``: name -> why it was left alone (Lightning has it, or it is disabled);
    - ``broken``: name -> the plugin's one-line error (also emitted as a
      :class:`~accelctl.PluginWarning`).
    """

    registered: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "registered": list(self.registered),
            "skipped": dict(self.skipped),
            "broken": dict(self.broken),
        }


def _owner(registry: _AcceleratorRegistry, name: str) -> object | None:
    # dict.get: the registry's own get() instantiates the accelerator.
    entry = dict.get(registry, name)
    return None if entry is None else entry.get("accelerator")


def _is_ours(accelerator: object) -> bool:
    return isinstance(accelerator, type) and issubclass(accelerator, LightningAccelerator)


def register_all(override: bool = False, *, registry: Registry | None = None) -> Registration:
    """Register every installed accelctl accelerator with Lightning, under its own name.

    Afterwards ``lightning.Trainer(accelerator="<name>")`` and ``lightning.Fabric(
    accelerator="<name>")`` build a :class:`LightningAccelerator` for that plugin. Names that
    Lightning already has (``cpu``, ``cuda``, ``mps``, ``tpu``, or another package's) are left
    alone unless ``override=True``; names registered by an earlier call are refreshed. Plugins
    disabled by ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` are not imported. A plugin that fails
    to load is skipped with a :class:`~accelctl.PluginWarning`, never an exception.

    Lightning refuses the name ``"hpu"`` in its automatic strategy choice: use
    ``Trainer(accelerator=LightningAccelerator("hpu"))`` (or name a strategy) for it.

    :param override: replace accelerators Lightning already has under the same name.
    :param registry: the accelctl registry to read (default: the process-wide one).
    :returns: a :class:`Registration` saying what was registered, skipped and broken.
    """
    source = get_registry() if registry is None else registry
    result = Registration()
    targets = (TRAINER_REGISTRY, FABRIC_REGISTRY)
    for name in source.names():
        blocked = source.plugin_filter.blocked_reason(name)
        if blocked:
            result.skipped[name] = blocked
            continue
        try:
            handle = source.get(name)
        except AccelctlError as exc:
            message = " ".join(str(exc).split())
            result.broken[name] = message
            warnings.warn(f"not registering with Lightning: {message}", PluginWarning, stacklevel=2)
            continue
        taken = [_owner(target, name) for target in targets if name in target]
        foreign = [owner for owner in taken if not _is_ours(owner)]
        if foreign and not override:
            owner = foreign[0]
            owner_name = getattr(owner, "__qualname__", type(owner).__name__)
            result.skipped[name] = (
                f"Lightning already has {name!r} ({owner_name}); register_all(override=True) "
                f"replaces it, LightningAccelerator({name!r}) uses accelctl's without replacing"
            )
            continue
        bound = LightningAccelerator.bind(handle)
        for target in targets:
            bound.register_accelerators(target)
        result.registered.append(name)
    return result

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

Lightning chooses the strategy, the DDP backend and the autocast device by accelerator type or
name; for accelctl's accelerators those choices follow the plugin instead (its device, its
``distributed_backend``, its device type), through one version-checked adaptation of Lightning's
connectors in :mod:`._lightning.connector`, applied by :func:`enable` when the
first bridge accelerator class is bound (never by importing this module); :func:`register_all`'s
work on Lightning's registries is in :mod:`._lightning.registries`. A
device/process mismatch known when the Trainer is made is refused then, with accelctl's error.
``docs/lightning.md`` lists each case.
"""

from __future__ import annotations

import itertools
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from ._lightning.adaptation import ADAPTATION as _ADAPTATION

try:
    # Before the bridge uses anything of Lightning: a release it cannot run on is refused here.
    _ADAPTATION.require()
    from lightning.fabric.accelerators.registry import _AcceleratorRegistry
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.accelerators import Accelerator as _LightningAcceleratorBase
    from lightning.pytorch.utilities import rank_zero_only
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without Lightning
    from ._shared.missing import framework_missing

    raise framework_missing("lightning", "Lightning", exc) from exc

import torch

from accelctl import (
    AccelctlError,
    AcceleratorHandle,
    AcceleratorUnavailableError,
    PluginHookError,
    PluginWarning,
    ProcessSetupError,
    get_accelerator,
)
from accelctl import Accelerator as _AccelctlAccelerator
from accelctl._choice.selection import known_name, single_process
from accelctl._host.registry import Registry, get_registry

# The same distribution as the core, released with it: the registry's internals and the rule
# accelctl.resolve applies to "auto" come from there, not from copies.
from accelctl._kernels.setup import set_up_kernels

from ._lightning import connector as _lightning_connector
from ._lightning import kernels as _lightning_kernels
from ._lightning import registries as _lightning_registries
from ._lightning import strategy as _lightning_strategy
from ._lightning.registries import Registration
from ._shared.patching import Patch

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = [
    "ADAPTATION",
    "ADAPTED",
    "LightningAccelerator",
    "Registration",
    "enable",
    "register_all",
]

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


def _rebuild(
    spec: object,
    subclass: type[LightningAccelerator] | None = None,
    state: dict[str, Any] | None = None,
) -> LightningAccelerator:
    """Rebuild the accelerator when unpickled in a ``ddp_spawn`` worker.

    Unpickle (``ddp_spawn`` workers): look the plugin up again in this process, and let it
    detect its hardware before anything else of the Trainer is unpickled.

    A plugin may register its ``torch.device`` type only when its runtime is imported (in
    ``detect()``, say); the strategy's devices, unpickled after the accelerator, need that type.
    ``subclass`` is a user's subclass of a bound class, rebuilt as itself (it is importable by
    name, and its definition binds the plugin again in this process); ``state`` its attributes.
    """
    accelerator = LightningAccelerator(spec) if subclass is None else subclass()
    handle = accelerator.accelctl_handle()
    if not handle.detect():
        reason = handle.unavailable_reason() or "its detect() is False"
        raise AcceleratorUnavailableError(
            f"accelctl accelerator {known_name(handle)!r} is not available in this spawned process "
            f"({reason}), so the Trainer sent to it cannot be rebuilt here",
            name=handle.name,
            reason=reason,
        )
    if state:
        accelerator.__dict__.update(state)
    return accelerator


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

    def __new__(cls, *args: Any, **kwargs: Any) -> LightningAccelerator:
        if cls._handle is not None and cls is not _BOUND.get(cls._handle):
            # A user's subclass of a bound class: its own __init__ takes its own arguments.
            return super().__new__(cls)
        return cls._new_bound(*args, **kwargs)

    @classmethod
    def _new_bound(cls, name_or_handle: object = None) -> LightningAccelerator:
        if cls._handle is None:
            if name_or_handle is None:
                raise TypeError(f"LightningAccelerator() needs the accelerator: {_ACCEPTED}")
            return super().__new__(cls.bind(name_or_handle))
        if name_or_handle is not None and _to_handle(name_or_handle) is not cls._handle:
            raise TypeError(
                f"{cls.__qualname__} is bound to accelerator {known_name(cls._handle)!r}; "
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
        enable()  # Lightning's choices follow the plugin's for the bound class's instances
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

    def __reduce__(self) -> tuple[Any, tuple[object, ...]]:
        # The bound class is made at run time, so pickle (ddp_spawn) by what rebuilds it: the
        # name for an installed plugin, the plugin object itself for one passed in directly. A
        # user's subclass of a bound class is a module-level class: it travels by reference.
        handle = self.accelctl_handle()
        spec = handle.plugin_name if handle.entry_point is not None else handle.plugin
        subclass = None if type(self) is _BOUND.get(handle) else type(self)
        return (_rebuild, (spec, subclass, dict(self.__dict__) or None))

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self.accelctl_handle()!r}>"

    # -- Lightning's class-level API ----------------------------------------------------------
    # Static methods in Lightning's base class, class methods here: Lightning calls them on the
    # class, which carries the handle.

    @classmethod
    def name(cls) -> str:
        """The accelctl accelerator's name (``openreg`` for the generic PrivateUse1 plugin)."""
        return cls.accelctl_handle().name

    @classmethod
    def is_available(cls) -> bool:
        """Return the plugin's ``detect()``; a broken hook counts as unavailable.

        A broken hook is reported as a :class:`~accelctl.PluginWarning`, never raised: Lightning
        asks every registered accelerator when it lists the available ones for an error
        message."""
        try:
            return cls.accelctl_handle().detect()
        except PluginHookError as exc:
            warnings.warn(f"{exc}; treating it as unavailable", PluginWarning, stacklevel=2)
            return False

    @classmethod
    def auto_device_count(cls) -> int:
        """Return what ``devices="auto"`` means, by accelctl's rule.

        Every device the plugin's ``auto_device_count()`` gives when it has a distributed backend,
        one device when it runs in a single process (``distributed_backend`` None). Explicit specs
        still reach every visible device (``devices=[1]``)."""
        handle = cls.accelctl_handle()
        count = handle.auto_device_count()
        if handle.info.distributed_backend is None:
            limited = single_process(count)  # the rule accelctl.resolve applies
            return limited if isinstance(limited, int) else len(limited)
        return count

    @classmethod
    def parse_devices(cls, devices: Any) -> int | list[int]:
        """Parse a devices spec with the plugin's ``parse_devices``.

        A bad spec raises :class:`accelctl.DeviceSpecError` (a ``ValueError``) naming the
        accelerator, the spec and the accepted forms."""
        return cls.accelctl_handle().parse_devices(devices)

    @classmethod
    def get_parallel_devices(cls, devices: Any) -> list[torch.device]:
        """The plugin's ``get_parallel_devices``: one ``torch.device`` per process.

        Lightning calls it when the Trainer (or Fabric) is made: several devices of a plugin
        without a distributed backend are refused here, before any process starts.

        :raises accelctl.ProcessSetupError: several devices, and no distributed backend.
        """
        handle = cls.accelctl_handle()
        parallel = handle.get_parallel_devices(devices)
        if len(parallel) > 1 and handle.info.distributed_backend is None:
            listed = ", ".join(str(device) for device in parallel)
            raise ProcessSetupError(
                f"accelctl accelerator {known_name(handle)!r} runs in a single process only (its "
                f"distributed_backend is None), but devices={devices!r} asks for "
                f"{len(parallel)} ({listed}), one process each. Use devices=1 (or "
                f"devices=[i] for another device), or an accelerator with a distributed backend"
            )
        return parallel

    @classmethod
    def device_type(cls) -> str | None:
        """The ``torch.device`` type of this accelerator's devices (None when it has none here)."""
        try:
            return cls.get_parallel_devices(cls.parse_devices(1))[0].type
        except (AccelctlError, IndexError):
            return None

    # -- per-process API ----------------------------------------------------------------------

    def setup_device(self, device: torch.device) -> None:
        """Set the device up with the plugin's ``setup_device``, then its missing kernels.

        After checking Lightning picked one of its devices; then what accelctl does about them
        (``ACCELCTL_CPU_FALLBACK=1``: they run on the CPU; docs/missing-kernels.md), once per
        process.

        With the connector adaptation (enabled when this class was bound: a Lightning it cannot
        adapt is refused when the bridge is imported), ``strategy="auto"`` gives the plugin's
        own device; a strategy naming another device is refused here, before training, with the
        one to pass.
        """
        expected = type(self).device_type()
        if expected is not None and device.type != expected:
            raise MisconfigurationException(
                f"accelctl accelerator {self.name()!r} was asked to set up device "
                f"{str(device)!r}, but its devices are {expected!r} devices. Pass one of its "
                f"devices: Trainer(accelerator=..., strategy=lightning.pytorch.strategies."
                f"SingleDeviceStrategy(device='{expected}:0')), or leave strategy='auto'"
            )
        handle = self.accelctl_handle()
        handle.setup_device(device)
        # Lightning's rank of this process, known here under each of its launchers.
        set_up_kernels(handle, device, rank=getattr(rank_zero_only, "rank", None))

    def setup(self, trainer: pl.Trainer) -> None:
        """Adapt the run's strategy to the plugin; called by it in each process first.

        Lightning's strategies call this before the model is moved, wrapped and given its
        optimizers. A DDP strategy then wraps the model on the current stream, and DDP's and
        ``ModelParallelStrategy``'s ``reduce`` take a mean as a sum divided by the world size
        (:mod:`._lightning.strategy`). The strategy's steps raise
        :class:`accelctl.MissingKernelError` for a kernel the device lacks
        (:mod:`._lightning.kernels`), and ``Trainer.fit`` with them. Does
        what Lightning does by accelerator type for its own CPU accelerator only: un-share CPU
        weights that ``ddp_spawn`` put in shared memory."""
        _lightning_strategy.adapt(trainer.strategy)
        _lightning_kernels.translate_steps(trainer.strategy, self.accelctl_handle().plugin_name)
        module = trainer.lightning_module
        cpu = trainer.strategy.root_device.type == "cpu"
        if module is not None and cpu and trainer.world_size > 1:
            _unshare_module_memory(module)

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """Return the plugin's ``device_stats`` for a device.

        Flat figures, units in the keys; an int is an index of this accelerator's device
        type."""
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
        """Register this bound class in ``accelerator_registry`` under the accelerator's name.

        ``openreg`` for the generic PrivateUse1 plugin."""
        handle = cls.accelctl_handle()
        accelerator_registry.register(
            handle.name,
            cls,
            description=_lightning_registries.description(handle),
            override=True,
        )


def _unshare_module_memory(module: torch.nn.Module) -> None:
    # torch.multiprocessing.spawn moves every tensor it passes to shared memory; CPU replicas
    # would then all step the same weights. Lightning copies them for its CPUAccelerator only.
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if tensor.untyped_storage().is_shared():
                tensor.data = tensor.data.clone()


def register_all(override: bool = False, *, registry: Registry | None = None) -> Registration:
    """Register every installed accelctl accelerator with Lightning.

    Under its own name and its aliases (the generic PrivateUse1 plugin's ``openreg``).

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
    return _lightning_registries.register(
        source,
        LightningAccelerator.bind,
        lambda owner: isinstance(owner, type) and issubclass(owner, LightningAccelerator),
        override,
    )


def _is_bridge_accelerator(accelerator: object) -> bool:
    return isinstance(accelerator, LightningAccelerator)


def enable() -> tuple[Patch, ...]:
    """Replace the Lightning methods that the bridge adapts, and return the records.

    Of Lightning's connectors, strategies and ``Fabric``; docs/lightning.md lists each, and why
    no public extension point serves. Idempotent. :meth:`LightningAccelerator.bind` calls it, so
    every bridge accelerator (made directly, by :func:`register_all`'s names, or unpickled in a
    ``ddp_spawn`` worker) has it; importing the bridge replaces nothing. Each replacement runs
    Lightning's own code for every accelerator that is not the bridge's."""
    _lightning_connector.install(_is_bridge_accelerator)
    return _lightning_connector.PATCHES.applied()


#: What the bridge adapts, the releases it is tested with, and why not adapted where not.
ADAPTATION = _lightning_connector.ADAPTATION
#: True: importing the bridge refuses a release it cannot adapt (see :data:`ADAPTATION`).
ADAPTED: bool = ADAPTATION.refusal == ""

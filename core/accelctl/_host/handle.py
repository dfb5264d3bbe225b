"""One installed plugin: :class:`AcceleratorHandle`, its identity, its state and its hooks.

Every consumer reads the same handle (docs/concepts.md, section 2a); each hook method calls the
plugin's function in the caller's thread and checks what it returns (:mod:`accelctl._host.returns`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast, get_args

from .._base.problem import Problem
from .._base.text import clean, quote, safe_repr, safe_str
from .._contract.accelerator import Accelerator
from .._contract.errors import (
    AccelctlError,
    AcceleratorUnavailableError,
    DeviceSpecError,
    PluginHookError,
    PluginLoadError,
    fresh_copy,
)
from .._contract.info import AcceleratorInfo
from .._contract.kernel_gaps import KernelGaps
from .discovery import Identity, Origin, name_problem, read_identity
from .isolation import failure_text, import_torch, watch_import
from .loading import HookDiagnosis, diagnose, hook_table, instantiate, name_of
from .returns import RETURN_CHECKS

if TYPE_CHECKING:
    import torch

    from .._contract.peak import DevicePeak

#: ``not-loaded``: found, not imported yet; ``loaded``: its hooks can be called; ``disabled``:
#: ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` keep it from being imported; ``broken``: loading
#: failed at :attr:`~AcceleratorHandle.stage` with :attr:`~AcceleratorHandle.error`.
State = Literal["not-loaded", "loaded", "disabled", "broken"]
#: Where loading failed, in the order loading runs.
Stage = Literal["metadata", "name", "conflict", "import", "instantiate", "register"]


class Loading(NamedTuple):
    """How loading a plugin went, one record replaced whole at each change.

    The :data:`State`, with the :data:`Stage` that failed and its error when broken, and why when
    disabled."""

    state: State
    stage: Stage | None = None
    error: AccelctlError | None = None
    reason: str | None = None


_NOT_LOADED = Loading("not-loaded")


class AcceleratorHandle:
    """One accelerator plugin: who it is, how loading it went, and a method per hook.

    Obtained from :func:`accelctl.get_accelerator`, :func:`accelctl.resolve`,
    :func:`accelctl.list_accelerators` or :meth:`from_object`.
    """

    #: Every :attr:`state`, and every :attr:`stage` in the order loading runs.
    STATES: tuple[State, ...] = get_args(State)
    STAGES: tuple[Stage, ...] = get_args(Stage)

    def __init__(
        self,
        name: str,
        entry_point: metadata.EntryPoint | None = None,
        origin: Origin | None = None,
        problem: Problem | None = None,
        *,
        disabled: str | None = None,
        conflict: AccelctlError | None = None,
    ) -> None:
        """Make the handle of the plugin called ``name`` from the registry's scan.

        ``name`` is the canonical name; the registry's scan gives the rest: the entry point, the
        ``.dist-info`` folder (``origin``), why that distribution's files cannot be trusted
        (``problem``), why the user's variables disable it (``disabled``), and the error of a name
        that several distributions claim (``conflict``)."""
        #: The plugin's own name, its canonical name: the entry point's name (or the object's, see
        #: :meth:`from_object`); what ``ACCELCTL_PLUGINS``, ``validate`` and a lookup that loads
        #: one plugin alone go by. :attr:`name` is the accelerator's, which may differ.
        self.plugin_name = name
        self._entry_point = entry_point
        self._origin = origin
        self._identity: Identity | None = None
        self._loading_state = _NOT_LOADED
        #: The plugin object (module or instance) once imported, kept when registering it failed.
        self.plugin: object | None = None
        self._hooks: dict[str, Callable[..., Any]] | None = None
        #: The hook being called (the outermost, where one calls another through the handle):
        #: what :meth:`busy_with` says. Calls from several threads at once may mix it up; it
        #: only words a message.
        self._calling: str | None = None
        self._info: AcceleratorInfo | None = None
        self._raised = False
        self._loading = threading.Lock()
        if disabled:  # the user's choice: never imported, whatever else is wrong with it
            self._loading_state = Loading("disabled", reason=disabled)
        elif problem is not None:
            self._fail("metadata", self._load_error(problem))
        elif conflict is not None:
            self._fail("conflict", conflict)

    # -- state: changed by the handle's own methods only ------------------------------------

    @property
    def state(self) -> State:
        """Return how loading went: ``not-loaded``, ``loaded``, ``disabled`` or ``broken``.

        Never what a listing found: see :class:`~accelctl.AcceleratorStatus`."""
        return self._loading_state.state

    @property
    def stage(self) -> Stage | None:
        """The stage that failed, with :attr:`error`; None unless broken."""
        return self._loading_state.stage

    @property
    def error(self) -> AccelctlError | None:
        """Why loading failed; None unless broken."""
        return self._loading_state.error

    @property
    def reason(self) -> str | None:
        """Why it is disabled (names the variable); None unless disabled."""
        return self._loading_state.reason

    @classmethod
    def from_object(
        cls, obj: object, name: str | None = None, *, check: bool = True
    ) -> AcceleratorHandle:
        """Make a handle on a plugin object without an entry point.

        An :class:`Accelerator` instance or subclass, or a module or object with
        ``@accelctl.hookimpl`` functions.

        :param check: raise where it cannot be used; ``False``: return the handle whatever
            loading it gave (``state``, ``stage`` and ``error`` say it: the conformance kit).
        :raises PluginLoadError: ``check`` and it cannot be instantiated or its hooks break the
            specs.
        """
        if isinstance(obj, cls):
            return obj
        handle = cls(name or name_of(obj))
        handle._load(obj)
        return handle.check() if check else handle

    # -- identity -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """Return the accelerator's name, the one a user types and accelctl shows.

        The device type a loaded plugin also answers to as an alias (the generic PrivateUse1 plugin
        serves ``openreg`` devices: ``openreg``), else :attr:`plugin_name`.

        Read from what the plugin said when it was loaded (never a hook call): before loading,
        and for a plugin whose ``accelerator_info()`` failed, it is the plugin's own name.
        """
        info = self._info
        if info is not None and info.device_type is not None and info.device_type in info.aliases:
            return info.device_type
        return self.plugin_name

    @property
    def distribution(self) -> str | None:
        """The distribution that installed the plugin; None for an object passed in directly."""
        return self._read_identity().distribution

    @property
    def version(self) -> str | None:
        """That distribution's version."""
        return self._read_identity().version

    @property
    def entry_point(self) -> str | None:
        """The entry point's value (``"module:attr"``); None for an object passed in directly."""
        return None if self._entry_point is None else self._entry_point.value

    def _read_identity(self) -> Identity:
        """Read the distribution's name and version, once.

        A read only: :meth:`identify` is what breaks the handle where they cannot be read."""
        if self._identity is None:
            self._identity = Identity(None, None)
            if self._origin is not None:
                self._identity = read_identity(self._origin)
        return self._identity

    def identify(self) -> AcceleratorHandle:
        """Read the distribution's metadata once; break the handle where it cannot be read.

        The broken stage is ``metadata``. Loading does this first; a listing without detection
        too."""
        problem = self._read_identity().problem
        if problem is not None:
            self._fail("metadata", self._load_error(problem))
        return self

    def describe(self) -> str:
        """Describe the accelerator as every message about it names it.

        ``"accelerator 'hpu' (accelctl-hpu 1.0)"``; ``"accelerator 'openreg' (plugin 'privateuse1',
        accelctl-torch-backend 0.1.0)"`` where the accelerator's name is not the plugin's."""
        dist, version, _ = self._read_identity()
        parts = [f"plugin {self.plugin_name!r}"] if self.name != self.plugin_name else []
        if dist:
            parts.append(f"{dist} {version}" if version else dist)
        return f"accelerator {self.name!r}" + (f" ({', '.join(parts)})" if parts else "")

    def __repr__(self) -> str:
        return f"<AcceleratorHandle {self.describe()} {self.state}>"

    # -- loading ------------------------------------------------------------------------------

    def _load_error(self, problem: Problem) -> PluginLoadError:
        """Return the error for a problem found before import, chained to its cause."""
        error = PluginLoadError(f"{self.describe()}: {problem}")
        error.__cause__ = problem.cause
        return error

    def _fail(self, stage: Stage, error: AccelctlError) -> None:
        if self._loading_state.state != "broken":
            self._loading_state = Loading("broken", stage, error)
            self._hooks = None

    def load(self) -> AcceleratorHandle:
        """Import, instantiate and validate the plugin, once, never raising for its failure.

        A disabled one is not imported. :attr:`state`, :attr:`stage` and :attr:`error` say how it
        went."""
        self.identify()
        if self.state == "not-loaded" and self._entry_point is not None:
            with self._loading:  # one import per handle, whichever thread asks first
                if self.state == "not-loaded":
                    self._import(self._entry_point)
        return self

    def _import(self, entry_point: metadata.EntryPoint) -> None:
        problem = name_problem(entry_point.name)
        if problem is not None:
            self._fail("name", self._load_error(problem))
            return
        try:
            with watch_import(self.describe()):
                obj = entry_point.load()
        except BaseException as exc:  # anything the plugin raised, its sys.exit() included
            error = PluginLoadError(
                f"{self.describe()}: importing {quote(entry_point.value)} failed: "
                f"{failure_text(exc)}"
            )
            error.__cause__ = exc
            self._fail("import", error)
            return
        self._load(obj)

    def _load(self, obj: object) -> None:
        try:
            plugin = instantiate(obj, self.describe())
        except PluginLoadError as exc:
            self._fail("instantiate", exc)
            return
        if isinstance(plugin, Accelerator) and self._entry_point is not None:
            plugin.bind_entry_point(self.plugin_name)
        self.plugin = plugin
        try:
            table = hook_table(plugin, self.describe())
        except PluginLoadError as exc:
            self._fail("register", exc)
            return
        self._hooks = table
        # Its info now, while loading (under the fan-out's deadline where several load at once),
        # so that :attr:`name` is known from here on without calling a hook; a failure is raised
        # where the info is used (:attr:`info`).
        try:
            self._info = self.accelerator_info()
        except AccelctlError:
            pass
        self._loading_state = Loading("loaded")

    def diagnose(self) -> HookDiagnosis | None:
        """Return the contract checks' verdict on the imported plugin's hooks, or None.

        Worked out now (the conformance checks' detail; loading keeps only its outcome); None before
        the plugin is imported or where a hook takes a parameter its specification lacks."""
        if self.plugin is None:
            return None
        return diagnose(self.plugin)

    def check(self) -> AcceleratorHandle:
        """Load the plugin and return the handle, or raise why it cannot be used.

        :raises AcceleratorUnavailableError: it is disabled.
        :raises PluginLoadError: it failed to load (the same error each time, raised anew).
        """
        self.load()
        if self.state == "loaded":
            return self
        if self.state == "disabled":
            name = self.plugin_name
            message = f"accelerator {name!r} is {self.reason}; unset or change it to use {name!r}"
            raise AcceleratorUnavailableError(message, name=name, reason=self.reason)
        assert self.error is not None
        if not self._raised:
            self._raised = True
            raise self.error
        # Raised anew each time, chained to the first: a caller adding context to the error it
        # caught must not change what the next one sees.
        raise fresh_copy(self.error) from self.error

    def implements(self, hook: str) -> bool:
        """True when the loaded plugin implements ``hook`` (optional hooks may be absent)."""
        return self._loaded_hooks().get(hook) is not None

    # -- calling hooks ------------------------------------------------------------------------

    def _loaded_hooks(self) -> dict[str, Callable[..., Any]]:
        if self._hooks is None:
            self.check()
        assert self._hooks is not None
        return self._hooks

    def _failed(self, hook: str, exc: BaseException) -> AccelctlError:
        """Return the error for what ``hook`` raised.

        A device hook's ``DeviceSpecError`` passes, its parts filled in; a Ctrl-C is raised as it
        is."""
        if isinstance(exc, DeviceSpecError) and hook in ("parse_devices", "get_parallel_devices"):
            if exc.accelerator is None:
                exc.accelerator = self.name
            return exc
        error = self._hook_error(hook, f"hook {hook}() raised {failure_text(exc)}")
        error.__cause__ = exc
        return error

    def _returned(self, hook: str, value: Any) -> Any:
        try:
            return RETURN_CHECKS[hook](value)
        except Exception as exc:  # TypeError/ValueError from the checks, or the value's own
            raise self._hook_error(
                hook,
                f"hook {hook}() returned {safe_repr(value)} ({type(value).__name__}); "
                f"{clean(safe_str(exc))}",
            ) from exc

    def _hook_error(self, hook: str | None, problem: str) -> PluginHookError:
        return PluginHookError(
            f"{self.describe()}: {problem}",
            name=self.plugin_name,
            hook=hook,
            distribution=self.distribution,
        )

    def _call(self, hook: str, *args: Any) -> Any:
        function = self._loaded_hooks().get(hook)
        if function is None:
            return None
        outer = self._calling
        self._calling = outer or hook
        try:
            value = function(*args)
        except BaseException as exc:  # a hook's sys.exit() too (test_hostile_plugins.py)
            raise self._failed(hook, exc)  # noqa: B904 - the cause is set: what the plugin raised
        finally:
            self._calling = outer
        return self._returned(hook, value)

    def detect(self) -> bool:
        """Say whether the accelerator can run torch work here now."""
        return bool(self._call("detect"))

    def auto_device_count(self) -> int:
        """Devices visible here; 0 when not detected."""
        return int(self._call("auto_device_count"))

    def parse_devices(self, devices: Any) -> int | list[int]:
        """Normalise a devices spec; raises :class:`~accelctl.DeviceSpecError` for bad ones."""
        try:
            result: int | list[int] = self._call("parse_devices", devices)
        except DeviceSpecError as exc:
            if exc.spec is None:
                exc.spec = devices
            raise
        return result

    def get_parallel_devices(self, devices: Any) -> list[torch.device]:
        """One ``torch.device`` per process for what :meth:`parse_devices` returned."""
        if "torch" not in sys.modules:
            import_torch()  # accelctl's own: a malformed package cannot break it
        return cast("list[torch.device]", self._call("get_parallel_devices", devices))

    def device_stats(self, device: torch.device | str) -> dict[str, int | float]:
        """Return flat figures for one device, given as a ``torch.device`` or its string.

        A string is like ``"cuda:0"``. The allocator's figures the plugin leaves out are read from
        ``torch.accelerator`` where this process already uses the device, and ``cpu_fallback_calls``
        is added where this process runs the device's missing kernels on the CPU (docs/concepts.md
        section 7)."""
        from .torch_memory import with_torch_memory  # torch-free until a device is in use

        stats = cast("dict[str, int | float]", self._call("device_stats", device))
        stats = with_torch_memory(stats, device)
        kernels = sys.modules.get("accelctl._kernels.setup")  # loaded where a fit set kernels up
        if kernels is not None:
            stats = kernels.with_fallback_calls(stats, str(device).split(":", 1)[0])
        return stats

    def device_peak(self, device: torch.device | str) -> DevicePeak | None:
        """Return the device's peak FLOPs per data type and memory bandwidth; None when unknown.

        Unknown: the plugin says so, or has no ``device_peak`` hook."""
        return cast("DevicePeak | None", self._call("device_peak", device))

    def kernel_gaps(self) -> KernelGaps:
        """Return the kernels the plugin declares its device lacks, and torch's CPU-fallback switch.

        The operators its device lacks or must never run on the CPU; empty when the plugin has no
        such hook."""
        return cast("KernelGaps", self._call("kernel_gaps") or KernelGaps())

    def unavailable_reason(self) -> str | None:
        """Why the accelerator is not available here, when the plugin says."""
        return cast("str | None", self._call("unavailable_reason"))

    @property
    def info(self) -> AcceleratorInfo:
        """Return the plugin's :class:`~accelctl.AcceleratorInfo`, read once.

        Defaults when it has no ``accelerator_info`` hook."""
        if self._info is None:
            self._info = self.accelerator_info()
        return self._info

    def accelerator_info(self) -> AcceleratorInfo:
        """Call the ``accelerator_info`` hook (uncached; see :attr:`info`)."""
        result: AcceleratorInfo | None = self._call("accelerator_info")
        return AcceleratorInfo() if result is None else result

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current in this process (nothing when the plugin has no such hook)."""
        self._call("setup_device", device)

    def teardown(self) -> None:
        """Release what the accelerator holds (nothing when the plugin has no such hook)."""
        self._call("teardown")

    def environment_info(self) -> dict[str, str | int | float | bool | None]:
        """The plugin's facts for ``accelctl env`` (``{}`` when it has no such hook)."""
        result: dict[str, str | int | float | bool | None] | None = self._call("environment_info")
        return {} if result is None else result

    # -- what the fan-out asks of the plugins it is asking -------------------------------------

    def busy_with(self) -> str:
        """Say what the plugin is doing, for a message.

        The hook being called (``"detect()"``), else ``"its import"`` before it is loaded, ``"its
        hooks"`` after."""
        calling = self._calling
        if calling is not None:
            return f"{calling}()"
        return "its import" if self.state == "not-loaded" else "its hooks"

    def error_for(self, hook: str | None, problem: str) -> PluginHookError:
        """Return this plugin's error for ``problem``, its subject named first.

        ``hook``: the hook it concerns. Used for a plugin past a deadline, or one whose asking
        ended the process that asked."""
        return self._hook_error(hook, problem)

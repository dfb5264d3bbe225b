"""Selecting what to run on: an accelerator (name, alias, "gpu", "auto", instance), its devices."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .._base.project import PROJECT_NAME
from .._base.text import end_sentence, quote, safe_repr
from .._base.wording import setting
from .._contract import settings
from .._contract.accelerator import Accelerator
from .._contract.device_specs import given_spec
from .._contract.errors import (
    AccelctlError,
    AcceleratorTypeError,
    AcceleratorUnavailableError,
    DeviceSpecError,
    fresh_copy,
)
from .._host.handle import AcceleratorHandle
from .._host.registry import Registry, get_registry, install_hint
from .._host.status import AcceleratorStatus

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Selection:
    """What a Trainer runs on: the accelerator's handle and one device per process."""

    accelerator: AcceleratorHandle
    devices: list[torch.device]
    #: What the plugin's ``parse_devices`` returned (a count or indices).
    parsed: int | list[int]
    #: The name the accelerator was asked by (``"openreg"``, ``"auto"``), for messages.
    asked: str | None = field(default=None, compare=False, repr=False)
    #: The devices spec as it was given (``"0,1"``, ``2``, ``"auto"``), for messages.
    spec: Any = field(default=None, compare=False, repr=False)
    #: The variable that gave :attr:`spec` in place of ``"auto"`` (``ACCELCTL_DEVICES``), or None.
    spec_variable: str | None = field(default=None, compare=False, repr=False)

    @property
    def shown_name(self) -> str:
        """The accelerator as the user knows it, for messages (:func:`known_name`)."""
        return known_name(self.accelerator, self.asked)

    @property
    def asked_devices(self) -> str:
        """Describe the devices spec as given and the devices it selected, for a message.

        ``devices='0,1' (openreg:0, openreg:1)``, or ``ACCELCTL_DEVICES='0,1' (...)`` where that
        variable gave it; processes that share one device (the CPU's) are not listed."""
        if self.spec_variable:
            given = f"{self.spec_variable}={quote(str(self.spec))}"
        else:
            given = setting("devices", self.spec, shown=safe_repr(self.spec))
        shown = [str(device) for device in self.devices]
        if len(set(shown)) > 1:
            given += f" ({', '.join(shown)})"
        return given

    @property
    def given_devices(self) -> str:
        """Return the devices as the user gave them, for ``--devices`` in a suggested command.

        ``0,1`` for ``devices="0,1"``, never the count 2; for ``"auto"``, what it selected."""
        return given_spec(self.spec, self.parsed)

    def first_device(self) -> Selection:
        """The same selection on its first device only (what one process alone can use)."""
        return replace(self, devices=self.devices[:1], parsed=single_process(self.parsed))

    @property
    def distributed_backend(self) -> str | None:
        """The ``torch.distributed`` backend for several processes; None: one process only."""
        return self.accelerator.info.distributed_backend

    @property
    def world_size(self) -> int:
        """Processes on this machine: one per device."""
        return len(self.devices)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``accelerator``, ``devices`` (as strings), ``distributed_backend``..."""
        return {
            "accelerator": self.accelerator.name,
            "plugin": self.accelerator.plugin_name,
            "devices": [str(device) for device in self.devices],
            "device_count": len(self.devices),
            "distributed_backend": self.distributed_backend,
            "family": self.accelerator.info.family,
            "distribution": self.accelerator.distribution,
            "version": self.accelerator.version,
        }


def known_name(handle: AcceleratorHandle, asked: object = None) -> str:
    """Return the accelerator's name as the user knows it.

    For messages and suggested commands: the alias it was asked by (``rocm``), else its
    :attr:`~accelctl.AcceleratorHandle.name` (the generic PrivateUse1 plugin's ``openreg``).
    ``--accelerator`` and ``accelerator=`` take each of them."""
    key = asked.strip().lower() if isinstance(asked, str) else ""
    if key and key != handle.name:
        try:
            if key in handle.info.aliases:
                return key
        except AccelctlError:
            pass
    return handle.name


def select_accelerator(
    accelerator: Any = "auto",
    *,
    registry: Registry | None = None,
    environ: Mapping[str, str] | None = None,
) -> AcceleratorHandle:
    """Select the accelerator for ``accelerator``: ``"auto"``, ``"gpu"``, a name or a plugin object.

    The accelerator for ``accelerator`` (docs/concepts.md section 6): ``"auto"``, ``"gpu"``, a
    name or alias (any case, which must be available), or a plugin object used as it is.
    ``ACCELCTL_ACCELERATOR`` is read from ``environ`` (default: ``os.environ``) before any plugin
    code runs, so no plugin can change what this call selects."""
    chosen = settings.SelectionVariables.read(environ)
    return _select(accelerator, registry or get_registry(), chosen.accelerator)


def asked_name(accelerator: Any, override: str) -> Any:
    """Return the name a selection of ``accelerator`` looks up.

    ``ACCELCTL_ACCELERATOR`` (``override``, as read) where ``"auto"`` was asked and the variable
    names an accelerator; else ``accelerator`` itself. The one place that rule lives (the CLI names
    the plugin a deadline is for by it)."""
    if (
        isinstance(accelerator, str)
        and accelerator.strip().lower() == "auto"
        and override
        and override.strip().lower() != "auto"
    ):
        return override
    return accelerator


def _select(accelerator: Any, registry: Registry, override: str) -> AcceleratorHandle:
    if not isinstance(accelerator, str):
        _check_plugin_object(accelerator)
        return AcceleratorHandle.from_object(accelerator)
    key = accelerator.strip().lower()
    if key == "auto":
        if asked_name(accelerator, override) is override:
            try:
                return _select(override, registry, "")
            except AccelctlError as exc:
                # The user asked for "auto": say where the name came from, and the way out.
                variable = settings.ACCELERATOR
                raise fresh_copy(
                    exc,
                    f"{variable}={quote(override)} sets what {setting('accelerator', 'auto')} "
                    "means, and: "
                    f"{end_sentence(str(exc))} Unset {variable} to choose automatically.",
                ) from exc
        return _select_best(registry, family=None)
    if key == "gpu":
        return _select_best(registry, family="gpu")
    handle = registry.get(key)
    if not handle.detect():
        reason = handle.unavailable_reason()
        because = f": {reason}" if reason else " (not detected)"
        asked = repr(key)
        if key not in (handle.name, handle.plugin_name):
            asked += f" (plugin {handle.plugin_name!r})"
        raise AcceleratorUnavailableError(
            f"accelerator {asked} is installed but not available here{because}. "
            f"Use {setting('accelerator', 'auto')} to take what is available, or `accelctl "
            "list` to see why",
            name=handle.name,
            reason=reason,
        )
    return handle


def _why(status: AcceleratorStatus) -> str:
    if status.error is not None:
        return f"broken: {status.error}"
    return "available" if status.available else status.reason or "not detected"


def _select_best(registry: Registry, family: str | None) -> AcceleratorHandle:
    """Return the available accelerator of highest priority, probing every enabled plugin at once.

    Of ``family``, when given; ties: the first name."""
    statuses = registry.candidates()
    if family is not None:  # a broken plugin's family is unknown: named in the error below
        statuses = [s for s in statuses if s.error is not None or s.family == family]
    available = [s for s in statuses if s.available]
    if available:
        return min(available, key=lambda s: (-(s.priority or 0), s.name)).accelerator
    if family is None:
        loadable = [s for s in statuses if s.error is None]
        installed = ", ".join(f"{s.name} ({_why(s)})" for s in loadable) or "none"
        disabled = [h.name for h in registry.plugins() if h.state == "disabled"]
        if disabled:
            advice = (
                f"disabled by {settings.PLUGINS}/{settings.DISABLE}: {', '.join(disabled)}; "
                "enable one (cpu is the floor)"
            )
        else:
            advice = "the CPU is the floor: " + install_hint(registry, "cpu")
        message = (
            f"{setting('accelerator', 'auto')} found no available accelerator (enabled and "
            "loadable: "
            f"{installed}); {advice}"
        )
    elif statuses:
        why = "; ".join(f"{s.name}: {_why(s)}" for s in statuses)
        message = (
            f"{setting('accelerator', 'gpu')} found no available gpu-family accelerator "
            f"({why}). Use {setting('accelerator', 'cpu')} to run on the CPU"
        )
    else:
        message = (
            f"{setting('accelerator', 'gpu')} found no gpu-family accelerator installed; "
            "install one: "
            "pip install accelctl-cuda (NVIDIA, AMD ROCm) or accelctl-mps (Apple silicon)"
        )
    raise AcceleratorUnavailableError(message, name=family or "auto")


#: What ``accelerator=`` accepts, for the error a wrong type gets.
ACCEPTED_ACCELERATORS = (
    '"auto", "gpu", an accelerator\'s name or alias (a str), an accelctl.Accelerator instance, '
    "an AcceleratorHandle, or a plugin object with @accelctl.hookimpl functions"
)


def _check_plugin_object(accelerator: object) -> None:
    """Refuse, as the caller's mistake, what is no plugin object.

    A ``torch.device``, None, a number: these would otherwise be blamed as a broken plugin."""
    if isinstance(accelerator, (AcceleratorHandle, Accelerator)) or (
        isinstance(accelerator, type) and issubclass(accelerator, Accelerator)
    ):
        return
    if not isinstance(accelerator, (type(None), bool, int, float, complex, list, tuple, dict)):
        if any(
            hasattr(getattr(accelerator, attr, None), f"{PROJECT_NAME}_impl")
            for attr in dir(accelerator)
        ):
            return  # a module or object with @accelctl.hookimpl functions
    hint = ""
    device_type = getattr(accelerator, "type", None)
    if type(accelerator).__name__ == "device" and isinstance(device_type, str):
        index = getattr(accelerator, "index", None)
        devices = "" if index is None else f", devices=[{index}]"
        hint = f" For a torch.device, pass its type: accelerator={device_type!r}{devices}."
    raise AcceleratorTypeError(
        f"accelerator={safe_repr(accelerator)} ({type(accelerator).__name__}) is not an "
        f"accelerator; accepted: {ACCEPTED_ACCELERATORS}.{hint}"
    )


def resolve(
    accelerator: Any = "auto",
    devices: Any = "auto",
    *,
    registry: Registry | None = None,
    environ: Mapping[str, str] | None = None,
) -> Selection:
    """Choose the accelerator (as :func:`select_accelerator`) and its devices, as a Trainer does.

    :param devices: a devices spec; ``"auto"`` means ``ACCELCTL_DEVICES`` when it is set (and
        is this accelerator's: :func:`devices_variable_applies`), else every visible device of an
        accelerator with a distributed backend, else the first one.
    :param environ: where ``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES`` are read (default:
        ``os.environ``), once, before any plugin code runs.
    :raises UnknownAcceleratorError, AcceleratorUnavailableError, PluginLoadError,
        DeviceSpecError: each with a message that says what to do.
    """
    chosen = settings.SelectionVariables.read(environ)  # now, before any plugin code runs
    handle = _select(accelerator, registry or get_registry(), chosen.accelerator)
    return resolve_chosen(handle, accelerator, devices, environ=environ, chosen=chosen)


def resolve_chosen(
    handle: AcceleratorHandle,
    accelerator: Any,
    devices: Any,
    *,
    environ: Mapping[str, str] | None = None,
    chosen: settings.SelectionVariables | None = None,
) -> Selection:
    """Resolve the devices of ``handle``, the second half of :func:`resolve`.

    :func:`select_accelerator` chose ``handle`` for ``accelerator`` (what the user asked, for
    messages). ``chosen``: the variables as :func:`resolve` read them (else read from ``environ``
    now)."""
    if chosen is None:
        chosen = settings.SelectionVariables.read(environ)
    given = devices
    processes = processes_here(environ)
    automatic = isinstance(devices, str) and devices.strip().lower() == "auto"
    from_environ = ""
    if automatic and chosen.devices:
        if devices_variable_applies(handle, chosen.accelerator):
            devices = from_environ = chosen.devices
            automatic = False
        elif processes is not None:
            devices = processes  # another accelerator's devices: one per process of the launch
            automatic = False
    try:
        parsed = handle.parse_devices(devices)
    except DeviceSpecError as exc:
        if not from_environ:
            raise
        # The user asked for "auto": say where the spec came from, on a copy of the error.
        raise fresh_copy(
            exc,
            f"{settings.DEVICES}={quote(from_environ)} sets what {setting('devices', 'auto')} "
            "means, and: "
            f"{end_sentence(str(exc))} Unset {settings.DEVICES} or give it an accepted spec.",
        ) from exc
    if automatic and handle.info.distributed_backend is None:
        parsed = single_process(parsed)
    # What the user typed, for messages: "auto" stands for ACCELCTL_ACCELERATOR when that is set.
    asked = asked_name(accelerator, chosen.accelerator) if isinstance(accelerator, str) else None
    return Selection(
        accelerator=handle,
        devices=handle.get_parallel_devices(parsed),
        parsed=parsed,
        asked=asked,
        spec=from_environ or given,
        spec_variable=settings.DEVICES if from_environ else None,
    )


def devices_variable_applies(handle: AcceleratorHandle, selected: str) -> bool:
    """Say whether ``ACCELCTL_DEVICES`` applies to ``handle``.

    ``selected``: what ``ACCELCTL_ACCELERATOR`` says (``""`` when unset).

    A launcher hands its children the devices of the accelerator it selected: its name in
    ``ACCELCTL_ACCELERATOR`` and its spec in ``ACCELCTL_DEVICES`` (``"0,1"`` for two ``openreg``
    devices), or only the spec for an object without an entry point it was given. A script that
    passes another accelerator (an instance made in the script, which the launcher cannot see,
    or another name) is not handed those devices: ``devices="auto"`` there is one device per
    process of the launch (:func:`processes_here`), as in a plain ``torchrun`` child, and the
    accelerator's own ``"auto"`` outside one.
    """
    name = selected.strip().lower()
    if not name or name == "auto":
        return True
    if handle.entry_point is None:  # no launcher names an object without an entry point
        return False
    if name in (handle.name, handle.plugin_name):
        return True
    try:
        return name in handle.info.aliases
    except AccelctlError:
        return False


def processes_here(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the processes of this launch on this machine, as a devices spec, or None.

    torchrun's ``LOCAL_WORLD_SIZE``; None outside a launch of several processes (the accelerator's
    own ``"auto"`` then)."""
    raw = (os.environ if environ is None else environ).get("LOCAL_WORLD_SIZE", "").strip()
    return raw if raw.isdigit() and int(raw) >= 1 else None


def single_process(parsed: int | list[int]) -> int | list[int]:
    """Return what ``devices="auto"`` keeps on an accelerator without a distributed backend.

    Its first device, so that "auto" never selects a setup that cannot run (a spec such as ``"1,"``
    can)."""
    return min(parsed, 1) if isinstance(parsed, int) else parsed[:1]

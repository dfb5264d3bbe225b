"""accelctl's own settings: every ``ACCELCTL_*`` variable, read here and nowhere else.

:data:`VARIABLES` is the table of docs/concepts.md section 10 (a test keeps the two equal), which
also says when each is read: always before any plugin code can change it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import NamedTuple

from .errors import AccelctlError
from .peak import DevicePeak

ACCELERATOR = "ACCELCTL_ACCELERATOR"
PLUGINS = "ACCELCTL_PLUGINS"
DISABLE = "ACCELCTL_DISABLE"
DEVICES = "ACCELCTL_DEVICES"
HOOK_TIMEOUT = "ACCELCTL_HOOK_TIMEOUT"
COLLECTIVE_TIMEOUT = "ACCELCTL_COLLECTIVE_TIMEOUT"
LAUNCHER_PID = "ACCELCTL_LAUNCHER_PID"
CKPT_PATH = "ACCELCTL_CKPT_PATH"
LAUNCH_ID = "ACCELCTL_LAUNCH_ID"
LAUNCH_NOTE = "ACCELCTL_LAUNCH_NOTE"
PEAK_FLOPS = "ACCELCTL_PEAK_FLOPS"
CPU_FALLBACK = "ACCELCTL_CPU_FALLBACK"
DEBUG = "ACCELCTL_DEBUG"

#: Seconds accelctl waits for one plugin's answer where it asks several at once.
DEFAULT_HOOK_TIMEOUT_S = 10.0
#: Seconds a collective of the Trainer's process group may wait for the other processes.
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0

#: name -> what it means (the table of docs/concepts.md section 10).
VARIABLES: dict[str, str] = {
    ACCELERATOR: 'what accelerator="auto" means (`cpu` keeps a script off the GPU)',
    PLUGINS: "comma list: load only these plugins (set and empty: none)",
    DISABLE: "comma list: never load these plugins",
    DEVICES: 'what devices="auto" means for the accelerator `ACCELCTL_ACCELERATOR` names (set '
    "by `accelctl launch` for its children)",
    HOOK_TIMEOUT: f"seconds one plugin may take to answer where accelctl asks several at once "
    f"(default {DEFAULT_HOOK_TIMEOUT_S:g}; `none` or `0`: no deadline)",
    COLLECTIVE_TIMEOUT: f"seconds a collective of the Trainer may wait for the other processes "
    f"(default {DEFAULT_COLLECTIVE_TIMEOUT_S:g})",
    LAUNCHER_PID: "set by `accelctl launch` in its children, which die with it",
    CKPT_PATH: "what `fit(ckpt_path=None)` means: `last`, or a checkpoint's path (to resume a "
    "run without editing its script)",
    LAUNCH_ID: "set by `accelctl launch` and `accelctl.launch` in their processes: the launch, "
    "whose restarts continue the run folder it wrote",
    LAUNCH_NOTE: "set by `accelctl launch` in its processes: the file where rank 0's Trainer "
    "notes its last checkpoint, for the launcher's report",
    PEAK_FLOPS: "the peak FLOPs per second of one device of the run, declared by the user (a "
    "number for every data type, or `bfloat16=2.4e12,float32=1.2e12`): the Trainer's `mfu` "
    "divides by it instead of the plugin's `device_peak`",
    CPU_FALLBACK: "`1`: the kernels a device lacks run on the CPU (a PrivateUse1 backend's, "
    "through accelctl's own kernels; MPS's, through torch's `PYTORCH_ENABLE_MPS_FALLBACK`), "
    "each named once in a warning and its calls counted (`cpu_fallback_calls`); `0` or unset: "
    "a missing kernel stops the run with `MissingKernelError`",
    DEBUG: "`1`: an accelctl error that ends a script or a launch shows its traceback, not only "
    "its one line (the CLI's `--debug`)",
}

#: The variables a plugin's import must leave alone (restored and reported when it does not).
USER_CHOICES = (ACCELERATOR, PLUGINS, DISABLE, DEVICES)


class SettingError(AccelctlError, ValueError):
    """An ``ACCELCTL_*`` variable holds what it cannot mean (the user's error, not a plugin's)."""


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip().lower() for part in value.split(",") if part.strip())


class PluginFilter(NamedTuple):
    """``ACCELCTL_PLUGINS`` (``allow``: None when unset, every plugin) and ``ACCELCTL_DISABLE``."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> PluginFilter:
        """Read both variables now (a registry does so at its first scan)."""
        env = _environ(environ)
        allow = env.get(PLUGINS)
        return cls(None if allow is None else _names(allow), _names(env.get(DISABLE, "")))

    @property
    def active(self) -> bool:
        """True when either variable narrows the plugins."""
        return self.allow is not None or bool(self.deny)

    def blocked_reason(self, name: str) -> str | None:
        """Why ``name`` must not be imported, naming the variable; None when it may be."""
        if name in self.deny:
            return f"disabled by {DISABLE}"
        if self.allow is not None and name not in self.allow:
            return (
                f"disabled: {PLUGINS}={','.join(sorted(self.allow)) or '<empty>'} does not list it"
            )
        return None


class SelectionVariables(NamedTuple):
    """The selection variables ``ACCELCTL_ACCELERATOR`` and ``ACCELCTL_DEVICES``.

    Both stripped ("" when unset); what they select is an :class:`accelctl.Selection`."""

    accelerator: str = ""
    devices: str = ""

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> SelectionVariables:
        """Read both variables now (:func:`accelctl.resolve` does so when it starts)."""
        env = _environ(environ)
        return cls(env.get(ACCELERATOR, "").strip(), env.get(DEVICES, "").strip())


def _seconds(
    name: str, default: float, environ: Mapping[str, str] | None, off: bool
) -> float | None:
    raw = _environ(environ).get(name, "").strip()
    if not raw:
        return default
    if off and raw.lower() in ("0", "none", "off"):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    # threading's waits overflow past about 9e9 s (their C limit); a year is "forever" enough.
    if not 0 < seconds <= 366 * 24 * 3600:
        forever = ", or 'none' to wait forever" if off else ""
        raise SettingError(
            f"{name}={raw[:40]!r} is not accepted: give a number of seconds > 0 (at most a "
            f"year; default {default:g}){forever}"
        )
    return seconds


def hook_timeout(environ: Mapping[str, str] | None = None) -> float | None:
    """``ACCELCTL_HOOK_TIMEOUT`` in seconds; None: no deadline. Raises :class:`SettingError`."""
    return _seconds(HOOK_TIMEOUT, DEFAULT_HOOK_TIMEOUT_S, environ, off=True)


def collective_timeout(environ: Mapping[str, str] | None = None) -> float:
    """``ACCELCTL_COLLECTIVE_TIMEOUT`` in seconds. Raises :class:`SettingError`."""
    seconds = _seconds(COLLECTIVE_TIMEOUT, DEFAULT_COLLECTIVE_TIMEOUT_S, environ, off=False)
    assert seconds is not None
    return seconds


def set_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of :data:`VARIABLES` that are set, as they are (``accelctl env``)."""
    env = _environ(environ)
    return {name: env[name] for name in VARIABLES if name in env}


def ckpt_path(environ: Mapping[str, str] | None = None) -> str | None:
    """``ACCELCTL_CKPT_PATH``, stripped; None when unset or empty."""
    return _environ(environ).get(CKPT_PATH, "").strip() or None


def launch_id(environ: Mapping[str, str] | None = None) -> str | None:
    """``ACCELCTL_LAUNCH_ID``: the launch this process is part of; None outside one."""
    return _environ(environ).get(LAUNCH_ID, "").strip() or None


def launch_note(environ: Mapping[str, str] | None = None) -> str | None:
    """Return ``ACCELCTL_LAUNCH_NOTE``, the launcher's checkpoint note file, or None.

    The file the launcher reads the last checkpoint from; None outside ``accelctl launch``."""
    return _environ(environ).get(LAUNCH_NOTE, "").strip() or None


def launcher_pid(environ: Mapping[str, str] | None = None) -> int | None:
    """The launcher's process id in a child of ``accelctl launch``; None elsewhere."""
    raw = _environ(environ).get(LAUNCHER_PID, "").strip()
    return int(raw) if raw.isdigit() else None


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def switched_on(value: str) -> bool:
    """True for a variable's value that turns a switch on (``1``, ``true``, ``yes``, ``on``)."""
    return value.strip().lower() in _TRUE


def _switch(name: str, environ: Mapping[str, str] | None) -> bool:
    raw = _environ(environ).get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise SettingError(f"{name}={raw[:40]!r} is not accepted: give 1 (on) or 0 (off)")


def cpu_fallback(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether ``ACCELCTL_CPU_FALLBACK`` is on.

    True for ``1`` (``true``, ``yes``, ``on``). Raises :class:`SettingError` for a value that is
    neither on nor off."""
    return _switch(CPU_FALLBACK, environ)


def debug(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether ``ACCELCTL_DEBUG`` is on; an unreadable value counts as on.

    On for ``1``. It is read where an error is being shown, and more detail is the safer mistake
    there."""
    try:
        return _switch(DEBUG, environ)
    except SettingError:
        return True


def declared_peak(environ: Mapping[str, str] | None = None) -> DevicePeak | None:
    """``ACCELCTL_PEAK_FLOPS`` as a :class:`~accelctl.DevicePeak` (None when unset or blank).

    Raises :class:`SettingError` naming the variable and the accepted forms."""
    raw = _environ(environ).get(PEAK_FLOPS, "").strip()
    if not raw:
        return None
    try:
        return DevicePeak.parse_flops(raw, source=f"declared by {PEAK_FLOPS}")
    except ValueError as exc:
        raise SettingError(f"{PEAK_FLOPS}={exc}") from None

"""The registry: installed plugins by name, loaded lazily and one at a time, failures recorded.

Entry points are read once per registry (once per process for the default one). A lookup by
canonical name imports that plugin alone; an alias, ``"auto"`` and ``"gpu"`` load every enabled
plugin. A plugin that fails to load is recorded with its error and never takes another down.
"""

from __future__ import annotations

import difflib
import functools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._config import Settings
from ._deadline import run_all
from ._isolation import failure_text, original, plugin_code, watch_import
from ._project import ENV_DISABLE, ENV_PLUGINS, RESERVED_NAMES
from ._text import one_line, quote
from .discovery import PluginEntry, PluginFilter, scan_entry_points
from .errors import (
    AccelctlError,
    AcceleratorUnavailableError,
    PluginConflictError,
    PluginLoadError,
    PluginWarning,
    UnknownAcceleratorError,
    fresh_copy,
)
from .handle import AcceleratorHandle
from .info import AcceleratorInfo, is_valid_name
from .loading import PluginOrigin, load_object

#: Well-known accelerator names and the distribution that provides each, for "did you mean" and
#: the pip command when a name is not installed (ROCm GPUs are torch's "cuda" device).
WELL_KNOWN = {
    "cpu": "accelctl-cpu",
    "cuda": "accelctl-cuda",
    "rocm": "accelctl-cuda",
    "mps": "accelctl-mps",
    "hpu": "accelctl-hpu",
    "xpu": "accelctl-xpu",
    "npu": "accelctl-npu",
    "tpu": "accelctl-tpu",
}


#: Longer names get no "pip install accelctl-<name>" hint: no plugin package is called so.
_LONGEST_HINTED_NAME = 64


@dataclass
class AcceleratorRecord:
    """One row of ``accelctl list``: what is installed and how it fares here.

    ``available`` and ``device_count`` are None when detection did not run (``--no-detect``), the
    plugin is disabled, or it is broken. ``reason`` says why a working plugin is unavailable or
    disabled; ``error`` is the one-line cause of a broken plugin.
    """

    name: str
    distribution: str | None
    version: str | None
    entry_point: str | None
    state: str  # "available", "unavailable", "disabled", "broken" or "not-run"
    family: str | None = None
    priority: int | None = None
    description: str | None = None
    distributed_backend: str | None = None
    aliases: tuple[str, ...] = ()
    available: bool | None = None
    device_count: int | None = None
    reason: str | None = None
    error: str | None = None
    handle: AcceleratorHandle | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the handle left out)."""
        return {
            "name": self.name,
            "available": self.available,
            "device_count": self.device_count,
            "family": self.family,
            "priority": self.priority,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.entry_point,
            "description": self.description,
            "distributed_backend": self.distributed_backend,
            "aliases": list(self.aliases),
            "state": self.state,
            "reason": self.reason,
            "error": self.error,
        }


def _origin(entry: PluginEntry) -> PluginOrigin:
    return PluginOrigin(
        name=entry.name,
        distribution=entry.distribution,
        version=entry.version,
        entry_point=entry.value,
    )


class Registry:
    """Installed accelerator plugins, discovered from entry points on ``path``.

    :param path: where to look for installed distributions (default: ``sys.path``).
    :param environ: where ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` are read (default:
        ``os.environ`` at the time of the first scan).
    """

    def __init__(
        self, path: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._path = path
        self._environ = environ
        self._entries: dict[str, list[PluginEntry]] | None = None
        self._filter: PluginFilter | None = None
        self._handles: dict[str, AcceleratorHandle] = {}
        self._failures: dict[str, AccelctlError] = {}

    # -- discovery --------------------------------------------------------------------------

    def _scan(self) -> dict[str, list[PluginEntry]]:
        if self._entries is None:
            by_name: dict[str, list[PluginEntry]] = {}
            for entry in scan_entry_points(self._path):
                by_name.setdefault(entry.name.lower(), []).append(entry)
            self._entries = by_name
            self._filter = Settings.from_environ(self._environ).plugin_filter
        return self._entries

    @property
    def plugin_filter(self) -> PluginFilter:
        """The allowlist / blocklist in force."""
        self._scan()
        assert self._filter is not None
        return self._filter

    def names(self) -> list[str]:
        """Canonical names of every installed accelerator (disabled and broken included)."""
        return sorted(self._scan())

    def entries(self, name: str) -> list[PluginEntry]:
        """The entry points that claim ``name`` (more than one is a conflict)."""
        return list(self._scan().get(name.lower(), ()))

    # -- loading ----------------------------------------------------------------------------

    def _load(self, name: str) -> AcceleratorHandle:
        """Load the plugin installed under canonical ``name``; errors are cached."""
        if name in self._handles:
            return self._handles[name]
        if name in self._failures:
            # Raised anew each time, chained to the first: the cached error is never handed out
            # to be edited (a caller adding context must not change what the next one sees).
            cached = self._failures[name]
            raise fresh_copy(cached) from cached
        entries = self.entries(name)
        blocked = self.plugin_filter.blocked_reason(name)
        if blocked:
            raise AcceleratorUnavailableError(
                f"accelerator {name!r} is {blocked}; unset or change it to use {name!r}",
                name=name,
                reason=blocked,
            )
        try:
            handle = self._load_entries(name, entries)
        except AccelctlError as exc:
            self._failures[name] = exc
            raise
        self._handles[name] = handle
        return handle

    def _load_entries(self, name: str, entries: list[PluginEntry]) -> AcceleratorHandle:
        distributions = sorted({entry.distribution or "?" for entry in entries})
        if len(entries) > 1:
            raise PluginConflictError(
                f"accelerator name {name!r} is claimed by {len(entries)} distributions: "
                f"{' and '.join(distributions)}; uninstall one of them "
                f"(pip uninstall {distributions[-1]})",
                name=name,
                distributions=distributions,
            )
        entry = entries[0]
        origin = _origin(entry)
        problem = entry.problem or entry.name_problem()
        if problem:
            raise PluginLoadError(
                f"{origin.describe()}: {problem}", name=name, distribution=entry.distribution
            )
        try:
            with watch_import(origin.describe()), plugin_code():
                obj = entry.load()
        except Exception as exc:  # anything the plugin raised, its sys.exit() included
            raise PluginLoadError(
                f"{origin.describe()}: importing {quote(entry.value)} failed: {failure_text(exc)}",
                name=name,
                distribution=entry.distribution,
            ) from original(exc)
        return AcceleratorHandle(load_object(obj, origin))

    def load_all(self) -> tuple[list[AcceleratorHandle], dict[str, AccelctlError]]:
        """Load every enabled plugin; return the handles and, per name, why the others failed.

        Disabled plugins are neither imported nor reported as failures.
        """
        handles: list[AcceleratorHandle] = []
        failures: dict[str, AccelctlError] = {}
        for name in self.names():
            if self.plugin_filter.blocked_reason(name):
                continue
            try:
                handles.append(self._load(name))
            except AccelctlError as exc:
                failures[name] = exc
        return handles, failures

    def usable(self) -> list[AcceleratorHandle]:
        """Every enabled plugin that loads; each one that does not is reported as a
        :class:`~accelctl.errors.PluginWarning` (skipped, never silently)."""
        handles, failures = self.load_all()
        for error in failures.values():
            warnings.warn(f"skipping {error}", PluginWarning, stacklevel=3)
        return handles

    # -- lookup -----------------------------------------------------------------------------

    def get(self, name: str) -> AcceleratorHandle:
        """The accelerator called ``name`` (canonical name or alias, any case).

        :raises UnknownAcceleratorError: nothing installed has that name or alias.
        :raises AcceleratorUnavailableError: it is disabled by ``ACCELCTL_PLUGINS`` /
            ``ACCELCTL_DISABLE``.
        :raises PluginLoadError: it failed to load, or two distributions claim it.
        """
        if not isinstance(name, str):
            raise TypeError(f"accelerator name must be a str, not {type(name).__name__}")
        key = name.strip().lower()
        if key in RESERVED_NAMES:
            raise UnknownAcceleratorError(
                f"{key!r} selects an accelerator, it is not one: use "
                f"accelctl.resolve({key!r}) or `accelctl resolve --accelerator {key}`",
                name=key,
                installed=self.names(),
            )
        if key in self._scan():
            return self._load(key)
        handle = self._by_alias(key)
        if handle is not None:
            return handle
        raise self._unknown(name, key)

    def _by_alias(self, key: str) -> AcceleratorHandle | None:
        handles, _ = self.load_all()
        # Every plugin's info, asked concurrently (each call under the deadline).
        outcomes = run_all([functools.partial(_aliases_of, handle) for handle in handles])
        owners = []
        for handle, outcome in zip(handles, outcomes, strict=True):
            if isinstance(outcome.error, AccelctlError):
                continue
            if key in outcome.unwrap():
                owners.append(handle)
        if len(owners) > 1:
            claimants = [f"{h.name} ({h.distribution or 'no distribution'})" for h in owners]
            raise PluginConflictError(
                f"alias {key!r} is claimed by {' and '.join(claimants)}; use a canonical name",
                name=key,
                distributions=[h.distribution or h.name for h in owners],
            )
        return owners[0] if owners else None

    def _aliases(self) -> list[str]:
        aliases: list[str] = []
        for handle in self._handles.values():
            try:
                aliases.extend(handle.info.aliases)
            except AccelctlError:
                continue
        return aliases

    def _unknown(self, asked: str, key: str) -> UnknownAcceleratorError:
        installed = self.names()
        close = difflib.get_close_matches(key, installed + self._aliases(), n=1, cutoff=0.6)
        shown = ", ".join(installed) if installed else "none"
        filters = ""
        if self.plugin_filter.allow is not None or self.plugin_filter.deny:
            filters = f" ({ENV_PLUGINS}/{ENV_DISABLE} are set)"
        message = f"no accelerator named {quote(asked)} is installed (installed: {shown}){filters}."
        if close:  # a typo of something installed: no package to install
            message += f" Did you mean {close[0]!r}?"
        else:
            # A typo of a well-known accelerator that is not installed: point at its plugin.
            known = difflib.get_close_matches(key, list(WELL_KNOWN), n=1, cutoff=0.6)
            name = known[0] if known else key
            if name != key:
                message += f" Did you mean {name!r}?"
            if not is_valid_name(name):  # no package can be named after it
                message += " Accelerator names are lowercase letters, digits, '_' and '-'."
                return UnknownAcceleratorError(message, name=key, installed=installed)
            if len(name) > _LONGEST_HINTED_NAME:
                return UnknownAcceleratorError(message, name=key, installed=installed)
            distribution = WELL_KNOWN.get(name, f"accelctl-{name}")
            dists = {e.distribution for n in installed for e in self.entries(n)}
            if distribution in dists:
                message += (
                    f" {distribution} is installed but offers no {name!r} on this machine "
                    "(see `accelctl list`)"
                )
            else:
                message += f" If a plugin provides it, install it: pip install {distribution}"
        return UnknownAcceleratorError(message, name=key, installed=installed)

    # -- listing ----------------------------------------------------------------------------

    def records(self, detect: bool = True) -> list[AcceleratorRecord]:
        """A row per installed accelerator; never raises for a broken plugin.

        Plugins are imported one after the other, then their hooks run concurrently, each call
        under the deadline (``ACCELCTL_HOOK_TIMEOUT``): a plugin that does not answer shows as
        broken, and the listing costs about the slowest plugin, not the sum.

        :param detect: run each plugin's ``detect`` (and so import it); False reads package
            metadata only and runs no plugin code.
        """
        rows = []
        for name in self.names():
            # Several entries under one name are a conflict: a row each, in a stable order.
            for entry in sorted(self.entries(name), key=lambda e: e.distribution or ""):
                rows.append(self._record(name, entry, detect))
        probed = [(row, row.handle) for row in rows if row.handle is not None]
        outcomes = run_all([functools.partial(_probe, handle) for _, handle in probed])
        for (row, _), outcome in zip(probed, outcomes, strict=True):
            if isinstance(outcome.error, AccelctlError):
                _mark_broken(row, outcome.error)
            else:
                outcome.unwrap().apply(row)
        return rows

    def _record(self, name: str, entry: PluginEntry, detect: bool) -> AcceleratorRecord:
        """The row from metadata, with the plugin loaded (its ``handle`` set) when it is to be
        probed; a plugin that fails to load is a broken row."""
        row = AcceleratorRecord(
            name=name,
            distribution=entry.distribution,
            version=entry.version,
            entry_point=entry.value,
            state="not-run",
        )
        blocked = self.plugin_filter.blocked_reason(name)
        if blocked:
            row.state, row.reason = "disabled", blocked
            return row
        if entry.problem:  # known from the metadata alone, so --no-detect shows it too
            row.state, row.error = (
                "broken",
                one_line(f"{_origin(entry).describe()}: {entry.problem}"),
            )
            return row
        if not detect:
            return row
        try:
            row.handle = self._load(name)
        except AccelctlError as exc:
            _mark_broken(row, exc)
        return row


def _aliases_of(handle: AcceleratorHandle) -> tuple[str, ...]:
    return handle.info.aliases


def _mark_broken(row: AcceleratorRecord, error: AccelctlError) -> None:
    row.state, row.error = "broken", one_line(error)
    row.available = row.device_count = row.reason = None


@dataclass(frozen=True)
class _Probed:
    """What a plugin's hooks said, for its row (built in a worker thread, applied by the caller:
    a worker abandoned past its deadline must not write into the row later)."""

    info: AcceleratorInfo
    available: bool
    device_count: int
    reason: str | None

    def apply(self, row: AcceleratorRecord) -> None:
        info = self.info
        row.family, row.priority, row.description = info.family, info.priority, info.description
        row.distributed_backend, row.aliases = info.distributed_backend, info.aliases
        row.available, row.device_count, row.reason = self.available, self.device_count, self.reason
        row.state = "available" if self.available else "unavailable"


def _probe(handle: AcceleratorHandle) -> _Probed:
    info = handle.info
    available = handle.detect()
    return _Probed(
        info=info,
        available=available,
        device_count=handle.auto_device_count() if available else 0,
        reason=None if available else handle.unavailable_reason(),
    )


_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry over ``sys.path`` (entry points are read once)."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def reset_registry() -> None:
    """Forget the process-wide registry: the next call scans entry points again (tests, or after
    ``pip install`` in a running process)."""
    global _default
    _default = None


def get_accelerator(name: str) -> AcceleratorHandle:
    """A handle on the accelerator called ``name`` (canonical name or alias, any case).

    A canonical name imports that plugin alone.
    """
    return get_registry().get(name)


def list_accelerators(detect: bool = True) -> list[AcceleratorRecord]:
    """Every installed accelerator as an :class:`AcceleratorRecord`, without raising for a
    broken one (its ``error`` says why)."""
    return get_registry().records(detect=detect)

# Over 400 lines for a reason: the registry is the one owner of every plugin's record (scan,
# load, the disabled decision, lookups by name and alias, list rows); splitting it would spread
# that ownership again, which is what issue 11 removed.
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
from ._discovery import PluginEntry, PluginFilter, scan_entry_points
from ._errors import (
    AccelctlError,
    AcceleratorUnavailableError,
    PluginConflictError,
    PluginLoadError,
    PluginWarning,
    UnknownAcceleratorError,
    fresh_copy,
)
from ._handle import AcceleratorHandle
from ._info import AcceleratorInfo, is_valid_name
from ._isolation import failure_text, original, plugin_code, watch_import
from ._loading import bind_name, instantiate, register
from ._project import ENV_DISABLE, ENV_PLUGINS, RESERVED_NAMES
from ._record import LoadStage, PluginRecord
from ._text import one_line, quote

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


class Registry:
    """Installed accelerator plugins, discovered from entry points on ``path``.

    The registry owns one :class:`~accelctl._record.PluginRecord` per installed entry point and
    is the only one to change it: the scan creates the records (``disabled`` ones decided then,
    by :meth:`disabled_reason`), :meth:`load` fills in how loading went.

    :param path: where to look for installed distributions (default: ``sys.path``).
    :param environ: where ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` are read (default:
        ``os.environ`` at the time of the first scan).
    """

    def __init__(
        self, path: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._path = path
        self._environ = environ
        self._records: dict[str, list[PluginRecord]] | None = None
        self._filter: PluginFilter | None = None
        #: Records whose error was raised once (later raises are fresh copies).
        self._raised: set[PluginRecord] = set()

    # -- discovery --------------------------------------------------------------------------

    def _scan(self) -> dict[str, list[PluginRecord]]:
        if self._records is None:
            self._filter = Settings.from_environ(self._environ).plugin_filter
            by_name: dict[str, list[PluginRecord]] = {}
            for entry in scan_entry_points(self._path):
                by_name.setdefault(entry.name.lower(), []).append(PluginRecord(entry))
            self._records = by_name
            for name, records in by_name.items():
                reason = self.disabled_reason(name)
                if reason:
                    for record in records:
                        record.state, record.reason = "disabled", reason
        return self._records

    @property
    def plugin_filter(self) -> PluginFilter:
        """The allowlist / blocklist in force."""
        self._scan()
        assert self._filter is not None
        return self._filter

    def names(self) -> list[str]:
        """Canonical names of every installed accelerator (disabled and broken included)."""
        return sorted(self._scan())

    def plugin_records(self, name: str | None = None) -> list[PluginRecord]:
        """The records of the entry points that claim ``name`` (more than one is a conflict),
        or of every installed entry point; by name, then distribution. Nothing is loaded."""
        scanned = self._scan()
        names = self.names() if name is None else [name.lower()]
        return [
            record
            for key in names
            for record in sorted(scanned.get(key, ()), key=lambda r: r.distribution or "")
        ]

    def entries(self, name: str) -> list[PluginEntry]:
        """The entry points that claim ``name`` (more than one is a conflict), in scan order."""
        return [record.entry for record in self._scan().get(name.lower(), ())]

    def disabled_reason(self, name: str) -> str | None:
        """Why ``name`` must not be imported (``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE``, named),
        or None when it may be: the one place that decides. The scan records the decision in
        each record's ``state``; every consumer reads it from there or asks here."""
        return self.plugin_filter.blocked_reason(name)

    def disabled_names(self) -> list[str]:
        """Installed names that are disabled, sorted."""
        return [name for name in self.names() if self.disabled_reason(name)]

    # -- loading ----------------------------------------------------------------------------

    def load(self, name: str) -> PluginRecord:
        """Load the plugin installed under canonical ``name`` (once) and return its record.

        Never raises for the plugin's failure: the record's ``state`` is ``"broken"``, with the
        ``stage`` that failed and the ``error``. A disabled plugin is not imported. When two
        distributions claim ``name``, every one of them is broken (stage ``"conflict"``, unless
        its metadata already cannot be read) and the first at stage ``"conflict"`` is returned.

        :raises UnknownAcceleratorError: no entry point has the canonical name ``name``.
        """
        key = name.lower()
        records = self.plugin_records(key)
        if not records:
            raise self._unknown(name, key)
        for record in records:
            _check_metadata(record)
        if len(records) > 1:
            error = _conflict(key, records)
            for record in records:
                if record.state == "not-loaded":
                    _fail(record, "conflict", error)
            return next((r for r in records if r.stage == "conflict"), records[0])
        (record,) = records
        if record.state == "not-loaded":
            _load_record(record)
        return record

    def _load(self, name: str) -> AcceleratorHandle:
        """The handle of the plugin installed under canonical ``name``, or its error."""
        record = self.load(name)
        if record.handle is not None:
            return record.handle
        if record.state == "disabled":
            raise AcceleratorUnavailableError(
                f"accelerator {name!r} is {record.reason}; unset or change it to use {name!r}",
                name=name,
                reason=record.reason,
            )
        assert record.error is not None
        if record not in self._raised:
            self._raised.add(record)
            raise record.error
        # Later raised anew each time, chained to the first: a caller adding context to the
        # error it caught must not change what the next one sees.
        raise fresh_copy(record.error) from record.error

    def load_all(self) -> tuple[list[AcceleratorHandle], dict[str, AccelctlError]]:
        """Load every enabled plugin; return the handles and, per name, why the others failed.

        Disabled plugins are neither imported nor reported as failures.
        """
        handles: list[AcceleratorHandle] = []
        failures: dict[str, AccelctlError] = {}
        for name in self.names():
            if self.disabled_reason(name):
                continue
            try:
                handles.append(self._load(name))
            except AccelctlError as exc:
                failures[name] = exc
        return handles, failures

    def usable(self) -> list[AcceleratorHandle]:
        """Every enabled plugin that loads; each one that does not is reported as a
        :class:`~accelctl._errors.PluginWarning` (skipped, never silently)."""
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
        for record in self.plugin_records():
            handle = record.handle
            if handle is None:
                continue
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
        # Several records under one name are a conflict: a row each, by distribution.
        for record in self.plugin_records():
            _check_metadata(record)  # known from the metadata alone: --no-detect shows it too
            if detect and record.state == "not-loaded":
                self.load(record.name)
            rows.append(_row(record))
        probed = [(row, row.handle) for row in rows if row.handle is not None]
        outcomes = run_all([functools.partial(_probe, handle) for _, handle in probed])
        for (row, _), outcome in zip(probed, outcomes, strict=True):
            if isinstance(outcome.error, AccelctlError):
                _mark_broken(row, outcome.error)
            else:
                outcome.unwrap().apply(row)
        return rows


def _row(record: PluginRecord) -> AcceleratorRecord:
    """The ``accelctl list`` row of a record, before its hooks are asked."""
    row = AcceleratorRecord(
        name=record.name,
        distribution=record.distribution,
        version=record.version,
        entry_point=record.entry_point,
        state="not-run",
        handle=record.handle,
    )
    if record.state == "disabled":
        row.state, row.reason = "disabled", record.reason
    elif record.state == "broken":
        assert record.error is not None
        _mark_broken(row, record.error)
    return row


# -- the record's transitions (the registry's alone) ------------------------------------------


def _fail(record: PluginRecord, stage: LoadStage, error: AccelctlError) -> None:
    record.state, record.stage, record.error = "broken", stage, error


def _check_metadata(record: PluginRecord) -> None:
    """Mark a record broken at stage ``metadata`` when its distribution cannot be read."""
    if record.state == "not-loaded" and record.entry.problem:
        _fail(
            record,
            "metadata",
            PluginLoadError(
                f"{record.describe()}: {record.entry.problem}",
                name=record.name,
                distribution=record.distribution,
            ),
        )


def _conflict(name: str, records: list[PluginRecord]) -> PluginConflictError:
    distributions = sorted({record.distribution or "?" for record in records})
    return PluginConflictError(
        f"accelerator name {name!r} is claimed by {len(records)} distributions: "
        f"{' and '.join(distributions)}; uninstall one of them "
        f"(pip uninstall {distributions[-1]})",
        name=name,
        distributions=distributions,
    )


def _load_record(record: PluginRecord) -> None:
    """Import, instantiate and register one record's plugin: ``loaded`` with its handle, or
    ``broken`` at the stage that failed."""
    entry, origin = record.entry, record.origin
    problem = entry.name_problem()
    if problem:
        _fail(
            record,
            "name",
            PluginLoadError(
                f"{origin.describe()}: {problem}", name=record.name, distribution=entry.distribution
            ),
        )
        return
    try:
        with watch_import(origin.describe()), plugin_code():
            obj = entry.load()
    except Exception as exc:  # anything the plugin raised, its sys.exit() included
        error = PluginLoadError(
            f"{origin.describe()}: importing {quote(entry.value)} failed: {failure_text(exc)}",
            name=record.name,
            distribution=entry.distribution,
        )
        error.__cause__ = original(exc)
        _fail(record, "import", error)
        return
    try:
        plugin = instantiate(obj, origin)
    except AccelctlError as exc:
        _fail(record, "instantiate", exc)
        return
    record.plugin = plugin
    try:
        loaded = register(bind_name(plugin, origin), origin)
    except AccelctlError as exc:
        _fail(record, "register", exc)
        return
    record.state, record.handle = "loaded", AcceleratorHandle(loaded)


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

# Over 400 lines for a reason: it is the one implementation of the conformance checks behind
# both `accelctl validate` and the pytest face; each check is a small function, and the table
# CHECKS at the top is their index (docs/writing-a-plugin.md mirrors it).
"""The conformance checks of contract section 9, run by ``accelctl validate`` and by the pytest
face (:class:`accelctl.testing.AcceleratorConformance`): one implementation, two faces.

:func:`validate` checks one accelerator (an installed name or alias, or a plugin object such as
an :class:`accelctl.Accelerator` instance) and returns a
:class:`~accelctl.testing.ValidationReport` with one result per entry of :data:`CHECKS`, in order.
It never raises for a broken plugin: the plugin's own error becomes a failed check's detail. A
check that cannot run here (no hardware, an optional hook left out, an earlier check failed) is
skipped and says why.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import hookspecs
from .._accelerator import Accelerator
from .._errors import AccelctlError, DeviceSpecError, PluginLoadError
from .._handle import AcceleratorHandle
from .._info import KNOWN_FAMILIES
from .._isolation import original, plugin_code
from .._loading import AcceleratorPluginManager, PluginOrigin, diagnose, instantiate
from .._project import RESERVED_NAMES
from .._registry import Registry, get_registry
from .._text import one_line, safe_repr
from . import probes
from .results import CheckResult, Status, ValidationReport

if TYPE_CHECKING:
    import torch

#: ``detect()``'s first call in a process may import the vendor's runtime, and is timed with
#: that import (torch itself is imported before the clock starts, without its out-of-tree
#: backends, which are loaded on the clock: they are the vendor's runtime).
DETECT_FIRST_CALL_LIMIT_S = 5.0
#: Every later ``detect()`` call: ``accelctl list`` and ``resolve("auto")`` call it for every
#: plugin, so it must answer in milliseconds; this bound leaves room for a loaded CI machine.
DETECT_CALL_LIMIT_S = 0.5
#: ``device_stats()`` must not block (no sampling sleeps).
STATS_CALL_LIMIT_S = 1.0
#: Importing the plugin's module in a fresh interpreter (accelctl's own import excluded).
IMPORT_LIMIT_S = 2.0

#: The device specs every accelerator refuses with a ``DeviceSpecError``, whatever it runs on.
BAD_DEVICE_SPECS: tuple[object, ...] = (0, -5, 1.5, "abc", None, True)

#: The common ``device_stats`` keys of contract section 7; other keys take the accelerator's
#: name as a prefix (``"cuda.num_alloc_retries"``).
COMMON_STATS_KEYS = frozenset(
    {
        "memory_allocated_bytes",
        "memory_reserved_bytes",
        "memory_used_bytes",
        "memory_total_bytes",
        "utilization_percent",
        "temperature_celsius",
        "power_watts",
        "cpu_percent",
        "swap_percent",
    }
)


@dataclass(frozen=True)
class Check:
    """One conformance check: its id (``accelctl validate`` prints it, the pytest face names its
    test ``test_<id>``) and what it verifies."""

    id: str
    title: str


#: Every check, in the order it runs and is reported.
CHECKS: tuple[Check, ...] = (
    Check(
        "loads",
        "the plugin imports and instantiates; its name is valid and claimed by one distribution",
    ),
    Check(
        "import_is_light",
        f"importing the plugin in a fresh interpreter imports no torch and takes under "
        f"{IMPORT_LIMIT_S:g} s",
    ),
    Check(
        "hooks_match_specs",
        "every hook passes pluggy's validation against accelctl.hookspecs; no unknown hook",
    ),
    Check(
        "required_hooks",
        f"the required hooks are implemented: {', '.join(hookspecs.REQUIRED_HOOKS)}",
    ),
    Check("detect_returns_bool", "detect() returns a bool and does not raise"),
    Check(
        "detect_is_fast",
        f"detect() returns within {DETECT_FIRST_CALL_LIMIT_S:g} s on its first call (the "
        f"vendor runtime's import included, torch's own excluded) and {DETECT_CALL_LIMIT_S:g} s "
        f"on later ones",
    ),
    Check(
        "detect_leaves_cuda_uninitialised",
        "detect() creates no CUDA context (a later fork stays safe)",
    ),
    Check(
        "auto_device_count",
        "auto_device_count() is an int: 0 when not detected, at least 1 when detected",
    ),
    Check("unavailable_reason", "where implemented and not detected: a str or None"),
    Check(
        "accelerator_info",
        "where implemented: valid fields, a known family or None, aliases that clash with no "
        "other installed name",
    ),
    Check(
        "environment_info",
        "where implemented: a flat dict of non-empty str keys to str, int, float, bool or None, "
        "without raising (accelctl env shows it)",
    ),
    Check(
        "bad_device_specs",
        "0, -5, 1.5, 'abc', None and True each raise DeviceSpecError (nothing else), naming "
        "the spec",
    ),
    Check(
        "devices_auto",
        "where detected: 'auto' -> parse_devices -> get_parallel_devices gives "
        "auto_device_count() torch.device of one type",
    ),
    Check(
        "devices_minus_one",
        "where detected: -1 gives the same devices as 'auto' (or, for a process-count "
        "accelerator, may be refused with DeviceSpecError)",
    ),
    Check("devices_one", "where detected: 1 gives exactly one torch.device"),
    Check(
        "device_stats",
        f"where detected: device_stats(first device), given as a torch.device and as its str "
        f"'<type>:<index>', is a flat dict of str to int/float with common or '<name>.' keys "
        f"(the same keys for both forms), within {STATS_CALL_LIMIT_S:g} s",
    ),
    Check(
        "distributed_backend",
        "where detected and a distributed_backend is declared: torch.distributed has that "
        "backend, registered for the devices' type",
    ),
)
CHECK_IDS: tuple[str, ...] = tuple(check.id for check in CHECKS)


# -- a run ----------------------------------------------------------------------------------


class _Run:
    """Collects the results of one accelerator's checks; unset checks end up skipped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.distribution: str | None = None
        self.version: str | None = None
        self.results: dict[str, CheckResult] = {}

    def record(
        self, check: str, status: Status, detail: str, error: BaseException | None = None
    ) -> None:
        assert check in CHECK_IDS, check
        self.results.setdefault(check, CheckResult(check, status, detail, error))

    def passed(self, check: str, detail: str) -> None:
        self.record(check, "pass", detail)

    def failed(self, check: str, detail: str, error: BaseException | None = None) -> None:
        self.record(check, "fail", detail, error)

    def skipped(self, check: str, detail: str) -> None:
        self.record(check, "skip", detail)

    def skip_rest(self, detail: str) -> None:
        for check in CHECK_IDS:
            self.skipped(check, detail)

    def report(self) -> ValidationReport:
        return ValidationReport(
            name=self.name,
            checks=tuple(self.results[check] for check in CHECK_IDS),
            distribution=self.distribution,
            version=self.version,
        )


@dataclass
class _Subject:
    """What is being validated, once it is known to import."""

    name: str
    plugin: object
    #: The module whose import cost is measured; None when it cannot be imported by name.
    module: str | None
    describe: str
    #: Why the registry refused the plugin although it imports (its hooks, most likely).
    load_error: AccelctlError | None = None


def _strip_subject(message: str, handle: AcceleratorHandle) -> str:
    prefix = f"{handle.loaded.origin.describe()}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


# -- entry points ---------------------------------------------------------------------------


def validate(
    accelerator: object,
    *,
    registry: Registry | None = None,
    probe_import: bool = True,
) -> ValidationReport:
    """Run every check of :data:`CHECKS` on one accelerator.

    :param accelerator: an installed accelerator's canonical name or alias (any case), or a
        plugin object without an entry point: an :class:`accelctl.Accelerator` instance or
        subclass, a module or object with ``@accelctl.hookimpl`` functions, or a handle.
    :param registry: where names are looked up and alias clashes searched (default: the
        process-wide registry).
    :param probe_import: measure the plugin's import in a fresh interpreter
        (``import_is_light``); False skips that check and saves a subprocess.
    :returns: a report with one result per check; it never raises for a broken plugin.
    """
    registry = registry or get_registry()
    if isinstance(accelerator, str):
        run = _Run(accelerator.strip().lower())
        subject = _subject_from_registry(accelerator, registry, run)
    else:
        run = _Run("?")
        subject = _subject_from_object(accelerator, run)
    if subject is not None:
        _run_checks(subject, registry, run, probe_import)
    return run.report()


def validate_installed(
    names: Iterable[str] | None = None,
    *,
    registry: Registry | None = None,
    probe_import: bool = True,
) -> list[ValidationReport]:
    """Validate the accelerators called ``names``, or every installed one.

    By default a plugin disabled by ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` is not imported:
    its report skips every check and names the variable. A disabled plugin asked for by name
    fails ``loads``, since the validation asked for cannot run.
    """
    registry = registry or get_registry()
    if names is None:
        reports = []
        for name in registry.names():
            blocked = registry.disabled_reason(name)
            if blocked:
                run = _Run(name)
                entry = registry.entries(name)[0]
                run.distribution, run.version = entry.distribution, entry.version
                run.skip_rest(f"{blocked}; not imported")
                reports.append(dataclasses.replace(run.report(), disabled=blocked))
            else:
                reports.append(validate(name, registry=registry, probe_import=probe_import))
        return reports
    unique = list(dict.fromkeys(name.strip().lower() for name in names))
    return [validate(name, registry=registry, probe_import=probe_import) for name in unique]


# -- loading --------------------------------------------------------------------------------


def _subject_from_registry(asked: str, registry: Registry, run: _Run) -> _Subject | None:
    """Ask the registry to load the plugin and read from its record how far it got: the checks
    go on from a plugin that imports, even when registering it failed (they say which hook)."""
    key = asked.strip().lower()
    if key not in registry.names():
        try:  # an alias (loads every enabled plugin), or nothing at all
            key = registry.get(key).name
        except AccelctlError as exc:
            run.failed("loads", one_line(exc), exc)
            run.skip_rest("nothing to check: no installed accelerator has this name")
            return None
        run.name = key
    record = registry.load(key)
    run.distribution, run.version = record.distribution, record.version
    if record.state == "disabled":
        run.failed("loads", f"{key!r} is {record.reason}; unset the variable to validate it")
        run.skip_rest("not imported: the plugin is disabled")
        return None
    if record.state == "broken" and record.stage != "register":
        assert record.error is not None
        run.failed("loads", one_line(record.error), record.error)
        run.skip_rest("the plugin did not load")
        return None
    plugin = record.handle.plugin if record.handle is not None else record.plugin
    module = record.entry_point.partition(":")[0].strip() or None
    describe = f"{record.entry_point} from {_dist(run)}"
    return _Subject(key, plugin, module, describe, record.error)


def _dist(run: _Run) -> str:
    if run.distribution:
        return f"{run.distribution} {run.version}" if run.version else run.distribution
    return "no distribution"


def _subject_from_object(obj: object, run: _Run) -> _Subject | None:
    if isinstance(obj, AcceleratorHandle):
        run.name = obj.name
        run.distribution, run.version = obj.distribution, obj.version
        return _Subject(obj.name, obj.plugin, _module_of(obj.plugin), repr(obj))
    name = _object_name(obj)
    run.name = name
    try:
        plugin = instantiate(obj, PluginOrigin(name=name))
    except PluginLoadError as exc:
        run.failed("loads", one_line(exc), exc)
        run.skip_rest("the plugin did not load")
        return None
    kind = "class" if inspect.isclass(obj) else "object"
    return _Subject(name, plugin, _module_of(plugin), f"{kind} {safe_repr(obj)} (no entry point)")


def _object_name(obj: object) -> str:
    if isinstance(obj, Accelerator):
        return obj.accelerator_name
    if inspect.isclass(obj) and issubclass(obj, Accelerator):
        return (obj.name or obj.__name__.removesuffix("Accelerator").lower() or "custom").lower()
    return str(
        getattr(obj, "name", "") or getattr(obj, "__name__", "") or type(obj).__name__
    ).lower()


def _module_of(plugin: object) -> str | None:
    module = plugin.__name__ if inspect.ismodule(plugin) else type(plugin).__module__
    return None if module in ("__main__", "builtins") else module


# -- the checks -----------------------------------------------------------------------------


def _run_checks(subject: _Subject, registry: Registry, run: _Run, probe_import: bool) -> None:
    _check_import(subject, run, probe_import)
    if not _check_hooks(subject, run):
        run.passed("loads", f"imported {subject.describe}; it does not register (see below)")
        run.skip_rest("the plugin does not register (see the failed check above)")
        return
    try:
        if subject.load_error is not None:
            raise subject.load_error
        handle = AcceleratorHandle.from_object(subject.plugin, name=subject.name)
    except AccelctlError as exc:  # not expected once the hooks passed; reported, never raised
        run.failed("loads", one_line(exc), exc)
        run.skip_rest("the plugin did not load")
        return
    run.passed("loads", f"imported {subject.describe}")
    detected = _check_detect(handle, run)
    count = _check_count(handle, detected, run)
    _check_reason(handle, detected, run)
    _check_info(handle, registry, run)
    _check_environment(handle, run)
    _check_bad_specs(handle, run)
    if detected is not True:
        why = "detect() failed" if detected is None else _not_detected(handle)
        for check in (
            "devices_auto",
            "devices_minus_one",
            "devices_one",
            "device_stats",
            "distributed_backend",
        ):
            run.skipped(check, f"needs the hardware: {why}")
        return
    first = _check_round_trips(handle, count, run)
    _check_stats(handle, first, run)
    _check_backend(handle, first, run)


def _not_detected(handle: AcceleratorHandle) -> str:
    try:
        reason = handle.unavailable_reason()
    except AccelctlError:
        reason = None
    return f"not detected here: {reason}" if reason else "not detected here"


def _check_import(subject: _Subject, run: _Run, probe_import: bool) -> None:
    check = "import_is_light"
    if not probe_import:
        run.skipped(check, "not measured (probe_import=False)")
        return
    if subject.module is None:
        run.skipped(check, "the plugin's module cannot be imported by name (defined in __main__)")
        return
    probe = probes.probe_import(subject.module)
    if probe.unreachable:
        run.skipped(
            check, f"module {subject.module!r} cannot be imported by name in a fresh interpreter"
        )
    elif probe.error:
        run.failed(
            check, f"importing {subject.module!r} in a fresh interpreter failed: {probe.error}"
        )
    elif probe.heavy:
        run.failed(
            check,
            f"importing {subject.module!r} imports {', '.join(probe.heavy)}: `accelctl list` "
            f"would pay for it; import it inside the hooks that need it",
        )
    elif probe.seconds > IMPORT_LIMIT_S:
        run.failed(
            check,
            f"importing {subject.module!r} took {probe.seconds:.2f} s (limit "
            f"{IMPORT_LIMIT_S:g} s); defer heavy imports to the hooks",
        )
    else:
        run.passed(check, f"{subject.module!r} imports in {_ms(probe.seconds)}, no torch")


def _check_hooks(subject: _Subject, run: _Run) -> bool:
    """pluggy's validation and the required hooks, on a manager of its own; True when both pass."""
    manager = AcceleratorPluginManager()
    try:
        with plugin_code():  # pluggy reads the plugin's attributes: its code may run
            manager.register(subject.plugin, name=subject.name)
    except Exception as exc:  # pluggy's validation, or the plugin's attributes raising
        run.failed("hooks_match_specs", one_line(exc), original(exc))
        run.skipped("required_hooks", "the hooks do not match the specs")
        return False
    try:
        diagnosis = diagnose(manager, subject.plugin)
    finally:
        manager.unregister(subject.plugin)
    implemented = diagnosis.implemented
    ok = True
    if diagnosis.unknown:
        ok = False
        run.failed("hooks_match_specs", diagnosis.unknown_message())
    else:
        run.passed("hooks_match_specs", f"{len(implemented)} hooks: {', '.join(implemented)}")
    if diagnosis.missing:
        ok = False
        run.failed("required_hooks", diagnosis.missing_message())
    else:
        optional = [hook for hook in hookspecs.OPTIONAL_HOOKS if hook in implemented]
        run.passed(
            "required_hooks",
            f"all {len(hookspecs.REQUIRED_HOOKS)} required hooks; optional: "
            f"{', '.join(optional) or 'none'}",
        )
    return ok


def _timed(function: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _check_detect(handle: AcceleratorHandle, run: _Run) -> bool | None:
    """detect()'s type, time and CUDA state; returns what it said (None when it broke)."""
    cuda_before = probes.cuda_initialized()
    load_backends = probes.import_torch_without_backends()  # torch's own import is not timed
    backends: list[str] = []

    def first_detect() -> bool:
        # The vendor's runtime may come through torch's backend autoload: on the plugin's clock.
        if load_backends is not None:
            backends.extend(load_backends())
        return handle.detect()

    try:
        detected, first = _timed(first_detect)
        again, later = _timed(handle.detect)
    except AccelctlError as exc:
        run.failed("detect_returns_bool", _strip_subject(one_line(exc), handle), exc)
        run.skipped("detect_is_fast", "detect() failed")
        run.skipped("detect_leaves_cuda_uninitialised", "detect() failed")
        return None
    except Exception as exc:  # a torch backend that fails to load breaks `import torch` too
        run.failed(
            "detect_returns_bool",
            f"loading torch's out-of-tree backends failed before detect() ran: "
            f"{one_line(exc)}; `import torch` fails the same way here "
            f"(TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns the autoload off)",
            exc,
        )
        run.skipped("detect_is_fast", "detect() did not run")
        run.skipped("detect_leaves_cuda_uninitialised", "detect() did not run")
        return None
    cuda_after = probes.cuda_initialized()
    if again != detected:
        run.failed(
            "detect_returns_bool",
            f"detect() returned {detected} then {again}: it must not change between two calls",
        )
    else:
        run.passed("detect_returns_bool", f"detect() returned {detected}")
    timing = f"first call {_ms(first)}, next {_ms(later)}"
    if load_backends is None:
        timing += (
            " (torch was imported before the check, with any vendor runtime it autoloads: run "
            f"`accelctl validate {handle.name}` in a fresh process to time that import)"
        )
    elif backends:
        timing += f" (the first includes loading torch backend(s) {', '.join(backends)})"
    if first > DETECT_FIRST_CALL_LIMIT_S:
        run.failed(
            "detect_is_fast",
            f"{timing}: over the first-call limit of {DETECT_FIRST_CALL_LIMIT_S:g} s; say no "
            f"cheaply first (is the vendor's package installed?) and cache what is slow",
        )
    elif later > DETECT_CALL_LIMIT_S:
        run.failed(
            "detect_is_fast",
            f"{timing}: over the limit of {DETECT_CALL_LIMIT_S:g} s for later calls; cache the "
            f"answer (functools.cache)",
        )
    else:
        run.passed(
            "detect_is_fast",
            f"{timing} (limits {DETECT_FIRST_CALL_LIMIT_S:g} s / {DETECT_CALL_LIMIT_S:g} s)",
        )
    check = "detect_leaves_cuda_uninitialised"
    if cuda_before:
        run.skipped(
            check,
            "CUDA was initialised in this process before detect() ran; run `accelctl validate "
            f"{handle.name}` in a fresh process to check",
        )
    elif cuda_after:
        run.failed(
            check,
            "detect() initialised CUDA (torch.cuda.is_initialized() became True): a later fork "
            "(DataLoader workers, launchers) breaks; count devices through NVML or "
            "torch.cuda.device_count(), which create no context",
        )
    else:
        run.passed(check, "torch.cuda.is_initialized() is still False")
    return bool(detected)


def _check_count(handle: AcceleratorHandle, detected: bool | None, run: _Run) -> int | None:
    check = "auto_device_count"
    try:
        count = handle.auto_device_count()
    except AccelctlError as exc:
        run.failed(check, _strip_subject(one_line(exc), handle), exc)
        return None
    if detected is False and count != 0:
        run.failed(check, f"returned {count} while detect() is False; return 0 when not detected")
    elif detected and count < 1:
        run.failed(
            check,
            "returned 0 while detect() is True: devices='auto' would select nothing; detect() "
            "must be False when no device is usable",
        )
    else:
        run.passed(check, f"{count} (detect() is {detected})")
    return count


def _check_reason(handle: AcceleratorHandle, detected: bool | None, run: _Run) -> None:
    check = "unavailable_reason"
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): `accelctl list` shows no reason")
        return
    if detected is not False:
        run.skipped(check, "called only when detect() is False; it is not here")
        return
    try:
        reason = handle.unavailable_reason()
    except AccelctlError as exc:
        run.failed(check, _strip_subject(one_line(exc), handle), exc)
        return
    run.passed(check, f"{reason!r}" if reason else "None (accelctl list shows no reason)")


def _check_environment(handle: AcceleratorHandle, run: _Run) -> None:
    check = "environment_info"
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): `accelctl env` shows the row alone")
        return
    try:
        facts = handle.environment_info()
    except AccelctlError as exc:  # raised, timed out, or returned what the spec does not allow
        run.failed(check, _strip_subject(one_line(exc), handle), exc)
        return
    shown = ", ".join(facts) if facts else "{} (nothing to add on this machine)"
    run.passed(check, f"{len(facts)} fact{'s' if len(facts) != 1 else ''}: {shown}")


def _check_info(handle: AcceleratorHandle, registry: Registry, run: _Run) -> None:
    check = "accelerator_info"
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): priority 0, no family, one process only")
        return
    try:
        info = handle.accelerator_info()
    except AccelctlError as exc:
        run.failed(check, _strip_subject(one_line(exc), handle), exc)
        return
    problems = []
    if info.family is not None and info.family not in KNOWN_FAMILIES:
        problems.append(
            f"family {info.family!r} is unknown (known: {', '.join(sorted(KNOWN_FAMILIES))}, "
            f"or None)"
        )
    clashes = _alias_clashes(handle.name, info.aliases, registry)
    if clashes:
        problems.append(f"aliases clash: {'; '.join(clashes)}")
    if problems:
        run.failed(check, "; ".join(problems))
        return
    run.passed(
        check,
        f"priority {info.priority}, family {info.family}, backend {info.distributed_backend}, "
        f"aliases {', '.join(info.aliases) or 'none'}",
    )


def _alias_clashes(name: str, aliases: Sequence[str], registry: Registry) -> list[str]:
    if not aliases:
        return []
    clashes = []
    others = set(registry.names()) - {name}
    owners: dict[str, list[str]] = {}
    if any(alias not in others and alias not in RESERVED_NAMES for alias in aliases):
        handles, _ = registry.load_all()  # the others' aliases need them loaded
        for other in handles:
            if other.name == name:
                continue
            try:
                for alias in other.info.aliases:
                    owners.setdefault(alias, []).append(other.name)
            except AccelctlError:
                continue
    for alias in aliases:
        if alias in RESERVED_NAMES:
            clashes.append(f"{alias!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})")
        elif alias in others:
            clashes.append(f"{alias!r} is the name of the installed accelerator {alias!r}")
        elif alias in owners:
            clashes.append(f"{alias!r} is also an alias of {', '.join(sorted(owners[alias]))}")
    return clashes


def _check_bad_specs(handle: AcceleratorHandle, run: _Run) -> None:
    problems = []
    error: BaseException | None = None
    for spec in BAD_DEVICE_SPECS:
        try:
            value = handle.parse_devices(spec)
        except DeviceSpecError as exc:
            if repr(spec) not in str(exc):
                problems.append(f"devices={spec!r}: the DeviceSpecError does not repeat the spec")
            continue
        except AccelctlError as exc:
            error = error or exc
            problems.append(f"devices={spec!r}: {_strip_subject(one_line(exc), handle)}")
            continue
        problems.append(f"devices={spec!r} was accepted as {value!r}")
    if problems:
        run.failed(
            "bad_device_specs",
            "; ".join(problems) + " (raise accelctl.DeviceSpecError; the core's parsers "
            "parse_indexed_devices / parse_process_count / parse_single_device do)",
            error,
        )
    else:
        specs = ", ".join(repr(spec) for spec in BAD_DEVICE_SPECS)
        run.passed("bad_device_specs", f"{specs}: each raised DeviceSpecError")


def _round_trip(
    handle: AcceleratorHandle, spec: object, expected: int | None
) -> tuple[int | list[int], list[torch.device]]:
    """parse_devices then get_parallel_devices; raises ValueError with the problem."""
    parsed = handle.parse_devices(spec)
    devices = handle.get_parallel_devices(parsed)
    wanted = len(parsed) if isinstance(parsed, list) else parsed
    shown = f"{spec!r} -> {parsed!r} -> [{', '.join(str(d) for d in devices)}]"
    if len(devices) != wanted:
        raise ValueError(f"{shown}: {len(devices)} devices for {wanted} processes")
    if expected is not None and wanted != expected:
        raise ValueError(f"{shown}: {wanted} devices where {expected} were expected")
    types = sorted({device.type for device in devices})
    if len(types) > 1:
        raise ValueError(f"{shown}: mixes device types {', '.join(types)}")
    indices = [device.index for device in devices]
    if all(index is not None for index in indices):
        if len(set(indices)) != len(indices):
            raise ValueError(f"{shown}: a device appears twice")
        if isinstance(parsed, list) and indices != parsed:
            raise ValueError(f"{shown}: device indices do not follow the parsed indices in order")
    return parsed, devices


def _check_round_trips(
    handle: AcceleratorHandle, count: int | None, run: _Run
) -> torch.device | None:
    first = None
    auto: int | list[int] | None = None
    for check, spec, expected in (
        ("devices_auto", "auto", count),
        ("devices_minus_one", -1, None),
        ("devices_one", 1, 1),
    ):
        try:
            parsed, devices = _round_trip(handle, spec, expected)
        except DeviceSpecError as exc:
            if spec == -1 and isinstance(auto, int):
                run.passed(check, "refused with DeviceSpecError (a process-count accelerator)")
            else:
                run.failed(check, f"devices={spec!r} was refused: {one_line(exc)}", exc)
            continue
        except (AccelctlError, ValueError) as exc:
            run.failed(check, _strip_subject(one_line(exc), handle), exc)
            continue
        if spec == "auto":
            auto, first = parsed, devices[0]
        elif spec == -1 and isinstance(auto, list) and parsed != auto:
            run.failed(check, f"-1 -> {parsed!r}, but 'auto' -> {auto!r}: both mean every device")
            continue
        shown = ", ".join(str(device) for device in devices)
        run.passed(check, f"{spec!r} -> {parsed!r} -> [{shown}]")
    return first


def _check_stats(handle: AcceleratorHandle, device: torch.device | None, run: _Run) -> None:
    check = "device_stats"
    if device is None:
        run.skipped(check, "needs a device from the devices_auto round trip, which failed")
        return
    # `accelctl stats` runs without torch: it asks for "<device_type or name>:<index>", which
    # should name the device the Trainer passes. Test plugins often stand in for hardware with
    # cpu devices, so a mismatch is a note in the detail rather than a failure.
    try:
        kind = handle.info.device_type or handle.name
    except AccelctlError:
        kind = handle.name  # a broken accelerator_info() fails its own check
    text = str(device)
    note = ""
    if device.type != kind:
        note = (
            f"; note: accelctl stats (without torch) asks for {kind!r} devices, not "
            f"{device.type!r}: set AcceleratorInfo(device_type={device.type!r})"
        )
    readings = []
    for form in (device, text):  # both forms of the contract: torch.device and "<type>:<index>"
        try:
            stats, seconds = _timed(handle.device_stats, form)
        except AccelctlError as exc:
            shown = f"{text!r} (a str)" if isinstance(form, str) else f"torch.device({text!r})"
            run.failed(check, f"{shown}: {_strip_subject(one_line(exc), handle)}", exc)
            return
        readings.append((stats, seconds))
    prefixes = tuple(f"{name}." for name in (handle.name, *_aliases(handle)))
    (stats, seconds), (by_text, text_seconds) = readings
    seconds = max(seconds, text_seconds)
    stray = sorted(
        key
        for key in {*stats, *by_text}
        if key not in COMMON_STATS_KEYS and not key.startswith(prefixes)
    )
    if stray:
        run.failed(
            check,
            f"key(s) {', '.join(map(repr, stray))} are neither common keys "
            f"({', '.join(sorted(COMMON_STATS_KEYS))}) nor prefixed with {prefixes[0]!r}",
        )
    elif set(stats) != set(by_text):
        run.failed(
            check,
            f"torch.device({text!r}) and the str {text!r} give different keys: "
            f"{', '.join(sorted(set(stats) ^ set(by_text)))}; both forms name the same device",
        )
    elif seconds > STATS_CALL_LIMIT_S:
        run.failed(
            check, f"took {seconds:.2f} s (limit {STATS_CALL_LIMIT_S:g} s): never sample or sleep"
        )
    else:
        keys = ", ".join(sorted(stats)) or "none: {} (nothing readable, allowed)"
        run.passed(
            check,
            f"{len(stats)} figures on {device} (torch.device and str alike) in {_ms(seconds)}: "
            f"{keys}{note}",
        )


def _check_backend(handle: AcceleratorHandle, device: torch.device | None, run: _Run) -> None:
    """The declared ``distributed_backend`` must exist in torch for the devices' type: a
    backend that cannot carry these tensors passes ``validate`` otherwise and fails in every
    rank of ``accelctl launch``."""
    check = "distributed_backend"
    try:
        backend = handle.info.distributed_backend
    except AccelctlError as exc:
        run.skipped(check, f"accelerator_info() failed: {one_line(exc)}")
        return
    if backend is None:
        run.passed(check, "None declared: the accelerator runs in one process")
        return
    if device is None:
        run.skipped(check, "needs a device from the devices_auto round trip, which failed")
        return
    problem = probes.backend_problem(backend, device.type)
    if problem is None:
        run.passed(check, f"{backend!r} is registered in torch.distributed for {device.type!r}")
    elif problem.startswith("skip: "):
        run.skipped(check, problem.removeprefix("skip: "))
    else:
        run.failed(
            check,
            f"distributed_backend={backend!r} {problem}; `accelctl launch --devices 2` would "
            f"fail in every rank. Declare the backend your torch extension registers for "
            f"{device.type!r} (torch.distributed.Backend.register_backend), or None for one "
            f"process only",
        )


def _aliases(handle: AcceleratorHandle) -> tuple[str, ...]:
    try:
        return handle.info.aliases
    except AccelctlError:
        return ()

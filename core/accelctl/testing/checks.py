"""The conformance checks behind ``accelctl validate`` and the pytest test class.

They are docs/concepts.md section 9's; the test class is
:class:`accelctl.testing.AcceleratorConformance`. A check that cannot run here says why it is
skipped; a broken plugin's error is a failed check's detail, never raised. The checks themselves are
in :mod:`._plugin_checks` (the plugin, its hooks, ``detect``) and :mod:`._device_checks`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from accelctl import AccelctlError, AcceleratorHandle, hookspecs
from accelctl._base.text import one_line, safe_repr
from accelctl._host import fanout as _fanout
from accelctl._host.registry import Registry, get_registry, load_each
from accelctl.torch_build import load_backends

from . import _device_checks as device
from . import _plugin_checks as plugin
from . import probes
from ._device_checks import STATS_CALL_LIMIT_S
from ._plugin_checks import DETECT_CALL_LIMIT_S, DETECT_FIRST_CALL_LIMIT_S, IMPORT_LIMIT_S
from .results import Run, ValidationReport


@dataclass(frozen=True)
class Check:
    """One conformance check: its id (the pytest face's test is ``test_<id>``) and what it does."""

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
        "every hook matches its specification in accelctl.hookspecs; no unknown hook",
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
        "kernel_gaps",
        "where implemented: a KernelGaps (or a dict of its fields) or None, every operator it "
        "names one this torch has",
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
        f"'<type>:<index>', is a flat dict of str to int/float following accelctl.stats_keys: "
        f"common keys or '<name>.' ones, units in the suffix, figures in their unit's range "
        f"(percent 0..100, bytes >= 0, allocated <= reserved <= total), the same keys for both "
        f"forms, within {STATS_CALL_LIMIT_S:g} s",
    ),
    Check(
        "device_peak",
        "where implemented and detected: a DevicePeak or None (unknown) for both forms of the "
        "first device, the same for both, FLOPs and bytes per second in plausible ranges",
    ),
    Check(
        "distributed_backend",
        "where detected and a distributed_backend is declared: torch.distributed has that "
        "backend, registered for the devices' type",
    ),
)
CHECK_IDS: tuple[str, ...] = tuple(check.id for check in CHECKS)
#: The checks that need the hardware: every one from ``devices_auto`` on.
_DEVICE_CHECKS = CHECK_IDS[CHECK_IDS.index("devices_auto") :]


def validate(
    accelerator: object,
    *,
    registry: Registry | None = None,
    probe_import: bool = True,
) -> ValidationReport:
    """Run every check of :data:`CHECKS` on one accelerator, in the caller's thread.

    A report with one result per check, never an exception for a broken plugin.

    :param accelerator: an installed name or alias (any case), or a plugin object without an entry
        point (an :class:`accelctl.Accelerator` instance or subclass, a module or object with
        ``@accelctl.hookimpl`` functions, a handle).
    :param registry: where names and alias clashes are looked up (default: the process-wide one).
    :param probe_import: False skips ``import_is_light`` (a subprocess).
    """
    registry = registry or get_registry()
    run = Run(str(accelerator).strip().lower() if isinstance(accelerator, str) else "?", CHECK_IDS)
    handle = _handle_of(accelerator, registry, run)
    if handle is not None:
        prepared = _prepare(handle, probe_import, torch_imported=False)
        for _ in _checks(handle, registry, run, prepared):
            pass
    return run.report()


def validate_installed(
    names: Iterable[str] | None = None,
    *,
    registry: Registry | None = None,
    probe_import: bool = True,
) -> list[ValidationReport]:
    """Validate the accelerators called ``names``, or every installed one, all at once.

    Each check runs under the deadline (``ACCELCTL_HOOK_TIMEOUT``). A disabled plugin is not
    imported: its report skips every check, or, asked for by name, fails ``loads``.

    In three phases: the plugins are found and loaded, asked at once by the fan-out; accelctl's
    own work for them follows in this thread (each import measured in a fresh interpreter,
    torch's import); then the checks go in steps (:func:`_checks`), each step of every plugin
    still checked asked at once by the fan-out.
    """
    registry = registry or get_registry()
    asked = (
        registry.names() if names is None else list(dict.fromkeys(n.strip().lower() for n in names))
    )
    everything = [_Asked(Run(name, CHECK_IDS)) for name in asked]
    active: list[_Asked] = []
    for each in everything:
        run = each.run
        if names is None:  # every installed plugin: a disabled one is reported, not imported
            handle = registry.claimants(run.name)[0]
            if handle.state == "disabled":
                run.distribution, run.version = handle.distribution, handle.version
                run.skip_rest(f"{handle.reason}; not imported")
                each.report = run.report(disabled=handle.reason)
                continue
        active.append(each)
    load_each([h for each in active for h in registry.claimants(each.run.name)[:1]])
    found = _fanout.run_each(active, lambda each: _handle_of(each.run.name, registry, each.run))
    for each, outcome in zip(active, found, strict=True):
        if isinstance(outcome, AccelctlError):  # it stopped answering while it was looked up
            each.stopped(outcome)
        else:
            each.handle = outcome
    active = [each for each in active if each.handle is not None]
    if len(active) > 1:
        # torch's import is nobody's time: before any detect() is timed.
        from accelctl.torch_build import import_torch

        import_torch()
    for each in active:
        assert each.handle is not None
        prepared = _prepare(each.handle, probe_import, torch_imported=len(active) > 1)
        each.steps = _checks(each.handle, registry, each.run, prepared)
    while active:
        stepped = _fanout.run_each(active, _Asked.advance)
        for each, outcome in zip(active, stepped, strict=True):
            if isinstance(outcome, AccelctlError):  # it stopped answering in the check it was in
                each.stopped(outcome)
        active = [each for each in active if each.steps is not None]
    return [each.report or each.run.report() for each in everything]


@dataclass(eq=False)
class _Asked:
    """One plugin being validated, as the fan-out sees it.

    Its run, its handle once found, its steps, and its report once done."""

    run: Run
    handle: AcceleratorHandle | None = None
    steps: Iterator[None] | None = None
    report: ValidationReport | None = None

    def advance(self) -> None:
        """Run the next step of the checks; at the end, make the report and drop the steps."""
        assert self.steps is not None
        if next(self.steps, _DONE) is _DONE:
            self.steps = None
            self.report = self.run.report()

    def stopped(self, error: AccelctlError) -> None:
        """Fail the check it stopped answering in, skip the rest."""
        run = self.run
        run.failed(run.current or "loads", one_line(error), error)
        run.skip_rest("not run: the plugin stopped answering in an earlier check")
        self.steps = None

    def busy_with(self) -> str:
        return "its checks" if self.handle is None else self.handle.busy_with()

    def error_for(self, hook: str | None, problem: str) -> AccelctlError:
        if self.handle is None:
            return AccelctlError(f"{self.run.name}: {problem}")
        return self.handle.error_for(hook, problem)


_DONE = object()


@dataclass(frozen=True)
class _Prepared:
    """accelctl's own work for one plugin's checks, done before any of them asks the plugin.

    The module checked and how the report names it; the plugin's import measured in a fresh
    interpreter (None: not measured), and what loads torch's out-of-tree backends where torch
    was imported without them (None: imported with them), so that neither is counted as the
    plugin's time."""

    module: str | None
    described: str
    import_probe: probes.ImportProbe | None
    load_backends: Callable[[], list[str]] | None


def _prepare(handle: AcceleratorHandle, probe_import: bool, *, torch_imported: bool) -> _Prepared:
    module, described = _subject(handle)
    probe = probes.probe_import(module) if probe_import and module is not None else None
    load_backends = None if torch_imported else probes.import_torch_without_backends()
    return _Prepared(module, described, probe, load_backends)


def _handle_of(accelerator: object, registry: Registry, run: Run) -> AcceleratorHandle | None:
    """The handle to check, loaded; None (``loads`` failed) when there is nothing to check.

    A plugin that imports is checked even when registering it failed (the checks say which hook)."""
    if isinstance(accelerator, AcceleratorHandle):
        handle = accelerator
    elif isinstance(accelerator, str):
        key = accelerator.strip().lower()
        claimants = registry.claimants(key)
        if claimants:
            handle = claimants[0]
        else:
            try:  # an alias (asks every enabled plugin), or nothing at all
                handle = registry.get(key)
            except AccelctlError as exc:
                run.failed("loads", one_line(exc), exc)
                run.skip_rest("nothing to check: no installed accelerator has this name")
                return None
    else:
        handle = AcceleratorHandle.from_object(accelerator, check=False)
    run.name = handle.plugin_name
    run.distribution, run.version = handle.distribution, handle.version
    handle.load()
    if handle.state == "disabled":
        run.failed(
            "loads", f"{handle.plugin_name!r} is {handle.reason}; unset the variable to validate it"
        )
        run.skip_rest("not imported: the plugin is disabled")
        return None
    if handle.state == "broken" and handle.stage != "register":
        assert handle.error is not None
        run.failed("loads", one_line(handle.error), handle.error)
        run.skip_rest("the plugin did not load")
        return None
    return handle


def _subject(handle: AcceleratorHandle) -> tuple[str | None, str]:
    """Return the module whose import is measured, and how the report names it.

    The module is what is validated; None: not importable by name."""
    entry = handle.entry_point
    if entry is not None:
        dist = " ".join(filter(None, [handle.distribution, handle.version])) or "no distribution"
        return entry.partition(":")[0].strip() or None, f"{entry} from {dist}"
    obj = handle.plugin
    module = obj.__name__ if inspect.ismodule(obj) else type(obj).__module__
    kind = "module" if inspect.ismodule(obj) else "object"
    return (
        None if module in ("__main__", "builtins") else module,
        f"{kind} {safe_repr(obj)} (no entry point)",
    )


def _checks(
    handle: AcceleratorHandle, registry: Registry, run: Run, prepared: _Prepared
) -> Iterator[None]:
    """Run the checks of one plugin in steps: each ``yield`` ends one.

    Where many plugins are validated at once, the fan-out asks each step of all of them at once."""
    described = prepared.described
    plugin.check_import(prepared.module, run, prepared.import_probe)
    yield None
    if not plugin.check_hooks(handle, run):
        run.passed("loads", f"imported {described}; it does not register (see below)")
        run.skip_rest("the plugin does not register (see the failed check above)")
        if prepared.load_backends is not None:  # torch, imported for detect(), gets its backends
            load_backends()
        return
    run.passed("loads", f"imported {described}")
    yield None
    detected = plugin.check_detect(handle, run, prepared.load_backends)
    yield None
    count = plugin.check_count(handle, detected, run)
    yield None
    plugin.check_reason(handle, detected, run)
    yield None
    plugin.check_info(handle, registry, run)
    yield None
    plugin.check_environment(handle, run)
    yield None
    plugin.check_kernel_gaps(handle, run)
    yield None
    device.check_bad_specs(handle, run)
    if detected is not True:
        why = "detect() failed" if detected is None else plugin.not_detected(handle)
        for check in _DEVICE_CHECKS:
            run.skipped(check, f"needs the hardware: {why}")
        return
    first = yield from device.check_round_trips(handle, count, run)
    yield None
    device.check_stats(handle, first, run)
    yield None
    device.check_peak(handle, first, run)
    yield None
    device.check_backend(handle, first, run)

"""The conformance checks behind ``accelctl validate`` and the pytest test class.

They are docs/concepts.md section 9's; the test class is
:class:`accelctl.testing.AcceleratorConformance`. A check that cannot run here says why it is
skipped; a broken plugin's error is a failed check's detail, never raised. The checks themselves are
in :mod:`._plugin_checks` (the plugin, its hooks, ``detect``) and :mod:`._device_checks`.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any

from accelctl import AccelctlError, AcceleratorHandle, hookspecs
from accelctl._base.text import one_line, safe_repr
from accelctl._host import fanout as _fanout
from accelctl._host.registry import Registry, get_registry, load_each

from . import _device_checks as device
from . import _plugin_checks as plugin
from ._device_checks import STATS_CALL_LIMIT_S
from ._plugin_checks import DETECT_CALL_LIMIT_S, DETECT_FIRST_CALL_LIMIT_S, IMPORT_LIMIT_S
from .results import Run, Unclocked, ValidationReport


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
    steps = _steps(accelerator, registry, run, probe_import)
    sent: Any = None
    while True:  # every step inline; accelctl's own slow work too
        try:
            step = steps.send(sent)
        except StopIteration:
            return run.report()
        sent = step.work() if step is not None else None


def validate_installed(
    names: Iterable[str] | None = None,
    *,
    registry: Registry | None = None,
    probe_import: bool = True,
) -> list[ValidationReport]:
    """Validate the accelerators called ``names``, or every installed one, all at once.

    Each check runs under the deadline (``ACCELCTL_HOOK_TIMEOUT``). A disabled plugin is not
    imported: its report skips every check, or, asked for by name, fails ``loads``.

    The checks of all the plugins go in steps (:func:`_steps`): each step of every plugin still
    checked is asked at once by the fan-out, with a deadline of its own; the work of accelctl's
    own that a step asks for (a subprocess with a timeout of its own, torch's import) is done
    between two fan-outs, outside any deadline.
    """
    registry = registry or get_registry()
    asked = (
        registry.names() if names is None else list(dict.fromkeys(n.strip().lower() for n in names))
    )
    everything = [_Asked(Run(name, CHECK_IDS)) for name in asked]
    for each in everything:
        run = each.run
        if names is None:  # every installed plugin: a disabled one is reported, not imported
            handle = registry.claimants(run.name)[0]
            if handle.state == "disabled":
                run.distribution, run.version = handle.distribution, handle.version
                run.skip_rest(f"{handle.reason}; not imported")
                each.report = run.report(disabled=handle.reason)
                continue
        each.steps = _steps(run.name, registry, run, probe_import, each)
    load_each([h for each in everything for h in registry.claimants(each.run.name)[:1]])
    if len(everything) > 1:
        # torch's import is nobody's time: before any detect() is timed.
        from accelctl.torch_build import import_torch

        import_torch()
    active = [each for each in everything if each.steps is not None]
    while active:
        stepped = _fanout.run_each(active, _Asked.advance)
        for each, outcome in zip(active, stepped, strict=True):
            if isinstance(outcome, AccelctlError):  # it stopped answering in the check it was in
                run = each.run
                run.failed(run.current or "loads", one_line(outcome), outcome)
                run.skip_rest("not run: the plugin stopped answering in an earlier check")
                each.steps = None
            elif isinstance(outcome, Unclocked):
                each.sent = outcome.work()
        active = [each for each in active if each.steps is not None]
    return [each.report or each.run.report() for each in everything]


@dataclass(eq=False)
class _Asked:
    """One plugin being validated, as the fan-out sees it.

    Its run, its steps and what the next step is sent, its handle once known, and its report once
    done."""

    run: Run
    handle: AcceleratorHandle | None = None
    steps: Generator[Unclocked | None, Any, None] | None = None
    sent: Any = None
    report: ValidationReport | None = None

    def advance(self) -> Unclocked | None:
        """Run the next step of the checks; at the end, make the report.

        The step is sent None at a check's end, or an :class:`Unclocked`'s work to do first; at the
        end the report is made and the steps are dropped."""
        assert self.steps is not None
        sent, self.sent = self.sent, None
        try:
            return self.steps.send(sent)
        except StopIteration:
            self.steps = None
            self.report = self.run.report()
            return None

    def busy_with(self) -> str:
        return "its checks" if self.handle is None else self.handle.busy_with()

    def error_for(self, hook: str | None, problem: str) -> AccelctlError:
        if self.handle is None:
            return AccelctlError(f"{self.run.name}: {problem}")
        return self.handle.error_for(hook, problem)


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


def _steps(
    accelerator: object,
    registry: Registry,
    run: Run,
    probe_import: bool,
    asked: _Asked | None = None,
) -> Generator[Unclocked | None, Any, None]:
    """Yield the checks of one plugin in steps, each asked with a deadline of its own.

    Each ``yield`` ends one; the deadlines matter where many plugins are validated at once. An
    :class:`Unclocked` asks for accelctl's own work, done outside the deadline and sent back."""
    handle = _handle_of(accelerator, registry, run)
    if handle is None:
        return
    if asked is not None:
        asked.handle = handle
    yield None
    module, described = _subject(handle)
    yield from plugin.check_import(module, run, probe_import)
    yield None
    if not plugin.check_hooks(handle, run):
        run.passed("loads", f"imported {described}; it does not register (see below)")
        run.skip_rest("the plugin does not register (see the failed check above)")
        return
    run.passed("loads", f"imported {described}")
    yield None
    detected = yield from plugin.check_detect(handle, run)
    yield None
    count = plugin.check_count(handle, detected, run)
    yield None
    plugin.check_reason(handle, detected, run)
    yield None
    plugin.check_info(handle, registry, run)
    yield None
    plugin.check_environment(handle, run)
    yield None
    yield from plugin.check_kernel_gaps(handle, run)
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

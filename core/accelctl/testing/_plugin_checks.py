"""The conformance checks of a plugin itself: its import, its hooks and what they answer.

The hooks checked: ``detect``, the device count, ``unavailable_reason``, ``accelerator_info`` and
``environment_info``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from accelctl import AccelctlError, AcceleratorHandle, hookspecs
from accelctl._base.project import RESERVED_NAMES
from accelctl._base.text import one_line
from accelctl._contract.info import KNOWN_FAMILIES
from accelctl._host.registry import Registry

from . import probes
from .results import Run

#: ``detect()``'s first call, timed with the vendor runtime's import (torch's own excluded, its
#: out-of-tree backends included: they are the vendor's runtime).
DETECT_FIRST_CALL_LIMIT_S = 5.0
#: Every later ``detect()`` call (``list`` and ``"auto"`` ask every plugin), with room for a
#: loaded CI machine.
DETECT_CALL_LIMIT_S = 0.5
#: Importing the plugin's module in a fresh interpreter (accelctl's own import excluded).
IMPORT_LIMIT_S = 2.0


def strip_subject(message: str, handle: AcceleratorHandle) -> str:
    """``message`` without the ``"accelerator 'x' (acme-x 1.0): "`` it starts with."""
    prefix = f"{handle.describe()}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


def not_detected(handle: AcceleratorHandle) -> str:
    try:
        reason = handle.unavailable_reason()
    except AccelctlError:
        reason = None
    return f"not detected here: {reason}" if reason else "not detected here"


def check_import(module: str | None, run: Run, probe: probes.ImportProbe | None) -> None:
    """Check the plugin's import as ``probe`` measured it (None: not measured)."""
    check = "import_is_light"
    run.start(check)
    if module is None:
        run.skipped(check, "the plugin's module cannot be imported by name (defined in __main__)")
        return
    if probe is None:
        run.skipped(check, "not measured (probe_import=False)")
        return
    if probe.unreachable:
        run.skipped(check, f"module {module!r} cannot be imported by name in a fresh interpreter")
    elif probe.error:
        run.failed(check, f"importing {module!r} in a fresh interpreter failed: {probe.error}")
    elif probe.heavy:
        run.failed(
            check,
            f"importing {module!r} imports {', '.join(probe.heavy)}: `accelctl list` would pay "
            f"for it; import it inside the hooks that need it",
        )
    elif probe.seconds > IMPORT_LIMIT_S:
        run.failed(
            check,
            f"importing {module!r} took {probe.seconds:.2f} s (limit {IMPORT_LIMIT_S:g} s); "
            f"defer heavy imports to the hooks",
        )
    else:
        run.passed(check, f"{module!r} imports in {ms(probe.seconds)}, no torch")


def check_hooks(handle: AcceleratorHandle, run: Run) -> bool:
    """Check the hooks against their specifications and the required hooks.

    From the handle's load; True if both pass."""
    run.start("hooks_match_specs")
    diagnosis = handle.diagnose()
    if diagnosis is None:  # a hook takes a parameter its spec lacks, or reading raised
        error = handle.error
        detail = strip_subject(one_line(error), handle) if error else "it did not register"
        run.failed("hooks_match_specs", detail, (error and error.__cause__) or error)
        run.skipped("required_hooks", "the hooks do not match the specs")
        return False
    implemented = diagnosis.implemented
    wrong = diagnosis.unknown_message() or diagnosis.wrappers_message()
    if wrong:
        run.failed("hooks_match_specs", wrong)
    else:
        run.passed("hooks_match_specs", f"{len(implemented)} hooks: {', '.join(implemented)}")
    missing = diagnosis.missing_message()
    if missing:
        run.failed("required_hooks", missing)
    else:
        optional = [hook for hook in hookspecs.OPTIONAL_HOOKS if hook in implemented]
        run.passed(
            "required_hooks",
            f"all {len(hookspecs.REQUIRED_HOOKS)} required hooks; optional: "
            f"{', '.join(optional) or 'none'}",
        )
    return not (wrong or missing)


def timed(function: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def check_detect(
    handle: AcceleratorHandle, run: Run, load_backends: Callable[[], list[str]] | None
) -> bool | None:
    """detect()'s type, time and CUDA state; returns what it said (None when it broke).

    ``load_backends`` loads torch's out-of-tree backends where torch was imported without them
    (:func:`probes.import_torch_without_backends`); the first call is timed with it."""
    run.start("detect_returns_bool")
    cuda_before = probes.cuda_initialized()
    backends: list[str] = []

    def first_detect() -> bool:
        # The vendor's runtime may come through torch's backend autoload: on the plugin's clock.
        if load_backends is not None:
            backends.extend(load_backends())
        return handle.detect()

    try:
        detected, first = timed(first_detect)
        again, later = timed(handle.detect)
    except Exception as exc:  # a torch backend that fails to load breaks `import torch` too
        if isinstance(exc, AccelctlError):
            detail, why = strip_subject(one_line(exc), handle), "detect() failed"
        else:
            detail, why = (
                f"loading torch's out-of-tree backends failed before detect() ran: "
                f"{one_line(exc)}; `import torch` fails the same way here "
                f"(TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns the autoload off)",
                "detect() did not run",
            )
        run.failed("detect_returns_bool", detail, exc)
        run.skipped("detect_is_fast", why)
        run.skipped("detect_leaves_cuda_uninitialised", why)
        return None
    cuda_after = probes.cuda_initialized()
    if again != detected:
        run.failed(
            "detect_returns_bool",
            f"detect() returned {detected} then {again}: it must not change between two calls",
        )
    else:
        run.passed("detect_returns_bool", f"detect() returned {detected}")
    timing = f"first call {ms(first)}, next {ms(later)}"
    if load_backends is None:
        timing += (
            " (torch was imported before the check, with any vendor runtime it autoloads: run "
            f"`accelctl validate {handle.plugin_name}` in a fresh process to time that import)"
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
            f"{handle.plugin_name}` in a fresh process to check",
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


def check_count(handle: AcceleratorHandle, detected: bool | None, run: Run) -> int | None:
    check = "auto_device_count"
    run.start(check)
    try:
        count = handle.auto_device_count()
    except AccelctlError as exc:
        run.failed(check, strip_subject(one_line(exc), handle), exc)
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


def check_reason(handle: AcceleratorHandle, detected: bool | None, run: Run) -> None:
    check = "unavailable_reason"
    run.start(check)
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): `accelctl list` shows no reason")
        return
    if detected is not False:
        run.skipped(check, "called only when detect() is False; it is not here")
        return
    try:
        reason = handle.unavailable_reason()
    except AccelctlError as exc:
        run.failed(check, strip_subject(one_line(exc), handle), exc)
        return
    run.passed(check, f"{reason!r}" if reason else "None (accelctl list shows no reason)")


def check_environment(handle: AcceleratorHandle, run: Run) -> None:
    check = "environment_info"
    run.start(check)
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): `accelctl env` shows the row alone")
        return
    try:
        facts = handle.environment_info()
    except AccelctlError as exc:  # raised, timed out, or returned what the spec does not allow
        run.failed(check, strip_subject(one_line(exc), handle), exc)
        return
    shown = ", ".join(facts) if facts else "{} (nothing to add on this machine)"
    run.passed(check, f"{len(facts)} fact{'s' if len(facts) != 1 else ''}: {shown}")


def check_kernel_gaps(handle: AcceleratorHandle, run: Run) -> None:
    """Check that ``kernel_gaps`` gives a :class:`accelctl.KernelGaps` or None.

    Naming operators this torch has (torch is imported before the checks)."""
    check = "kernel_gaps"
    run.start(check)
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): missing kernels show as torch's errors")
        return
    try:
        gaps = handle.kernel_gaps()
    except AccelctlError as exc:
        run.failed(check, strip_subject(one_line(exc), handle), exc)
        return
    unknown = [name for name in (*gaps.missing, *gaps.never_fall_back) if not operator_exists(name)]
    if unknown:
        run.failed(
            check,
            f"{', '.join(unknown)}: no such operator in torch {torch_version()} (names as "
            "torch's dispatcher gives them: 'aten::convolution_overrideable')",
        )
        return
    declared = (
        f"{len(gaps.missing)} missing, {len(gaps.never_fall_back)} never to fall back, "
        f"torch's switch {gaps.fallback_variable or 'none'}"
    )
    run.passed(check, declared + (f" ({gaps.note})" if gaps.note else ""))


def operator_exists(name: str) -> bool:
    """True where this torch has the operator ``namespace::name[.overload]``."""
    import torch

    namespace, _, rest = name.partition("::")
    op_name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
        getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return False
    return True


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def check_info(handle: AcceleratorHandle, registry: Registry, run: Run) -> None:
    check = "accelerator_info"
    run.start(check)
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): priority 0, no family, one process only")
        return
    try:
        info = handle.accelerator_info()
    except AccelctlError as exc:
        run.failed(check, strip_subject(one_line(exc), handle), exc)
        return
    problems = []
    if info.family is not None and info.family not in KNOWN_FAMILIES:
        problems.append(
            f"family {info.family!r} is unknown (known: {', '.join(sorted(KNOWN_FAMILIES))}, "
            f"or None)"
        )
    clashes = alias_clashes(handle.plugin_name, info.aliases, registry)
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


def alias_clashes(name: str, aliases: Sequence[str], registry: Registry) -> list[str]:
    if not aliases:
        return []
    clashes = []
    others = set(registry.names()) - {name}
    owners: dict[str, list[str]] = {}
    if any(alias not in others and alias not in RESERVED_NAMES for alias in aliases):
        for other in registry.enabled():  # the others' aliases need them loaded
            if other.plugin_name == name or other.load().state != "loaded":
                continue
            try:
                for alias in other.info.aliases:
                    owners.setdefault(alias, []).append(other.plugin_name)
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

"""The conformance checks of a plugin's devices.

Bad specs, the round trips from a spec to ``torch.device`` objects, ``device_stats`` and the
declared distributed backend."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING

from accelctl import AccelctlError, AcceleratorHandle, DevicePeak, DeviceSpecError
from accelctl._base.text import one_line
from accelctl._base.wording import setting
from accelctl.stats_keys import VOCABULARY
from accelctl.stats_keys import problems as vocabulary_problems

from . import probes
from ._plugin_checks import ms, strip_subject, timed
from .results import Run

if TYPE_CHECKING:
    import torch

#: ``device_stats()`` must not block (no sampling sleeps).
STATS_CALL_LIMIT_S = 1.0

#: The device specs every accelerator refuses with a ``DeviceSpecError``, whatever it runs on.
BAD_DEVICE_SPECS: tuple[object, ...] = (0, -5, 1.5, "abc", None, True)

#: The common ``device_stats`` keys (:data:`accelctl.stats_keys.VOCABULARY`); other keys take the
#: accelerator's name as a prefix (``"cuda.num_alloc_retries"``).
COMMON_STATS_KEYS = frozenset(VOCABULARY)

#: A peak outside these bounds (per device) is a unit slip: TFLOPs given as FLOPs, GB/s as B/s.
PEAK_FLOPS_BOUNDS = (1e9, 1e18)
PEAK_BANDWIDTH_BOUNDS = (1e8, 1e15)


def check_bad_specs(handle: AcceleratorHandle, run: Run) -> None:
    run.start("bad_device_specs")
    problems = []
    error: BaseException | None = None
    for spec in BAD_DEVICE_SPECS:
        try:
            value = handle.parse_devices(spec)
        except DeviceSpecError as exc:
            # As a Python program or a command line writes it (`validate` runs under the CLI).
            if repr(spec) not in str(exc) and setting("devices", spec) not in str(exc):
                problems.append(f"devices={spec!r}: the DeviceSpecError does not repeat the spec")
            continue
        except AccelctlError as exc:
            error = error or exc
            problems.append(f"devices={spec!r}: {strip_subject(one_line(exc), handle)}")
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


def check_round_trips(
    handle: AcceleratorHandle, count: int | None, run: Run
) -> Generator[None, None, torch.device | None]:
    """Each of the three round trips one step (its own deadline where several are asked)."""
    first = None
    auto: int | list[int] | None = None
    for check, spec, expected in (
        ("devices_auto", "auto", count),
        ("devices_minus_one", -1, None),
        ("devices_one", 1, 1),
    ):
        yield None
        run.start(check)
        try:
            parsed, devices = _round_trip(handle, spec, expected)
        except DeviceSpecError as exc:
            if spec == -1 and isinstance(auto, int):
                run.passed(check, "refused with DeviceSpecError (a process-count accelerator)")
            else:
                run.failed(check, f"devices={spec!r} was refused: {one_line(exc)}", exc)
            continue
        except (AccelctlError, ValueError) as exc:
            run.failed(check, strip_subject(one_line(exc), handle), exc)
            continue
        if spec == "auto":
            auto, first = parsed, devices[0]
        elif spec == -1 and isinstance(auto, list) and parsed != auto:
            run.failed(check, f"-1 -> {parsed!r}, but 'auto' -> {auto!r}: both mean every device")
            continue
        shown = ", ".join(str(device) for device in devices)
        run.passed(check, f"{spec!r} -> {parsed!r} -> [{shown}]")
    return first


def check_stats(handle: AcceleratorHandle, device: torch.device | None, run: Run) -> None:
    check = "device_stats"
    run.start(check)
    if device is None:
        run.skipped(check, "needs a device from the devices_auto round trip, which failed")
        return
    # `accelctl stats` runs without torch: it asks for "<device_type or name>:<index>", which
    # should name the device the Trainer passes. Test plugins often stand in for hardware with
    # cpu devices, so a mismatch is a note in the detail rather than a failure.
    try:
        kind, aliases = handle.info.device_type or handle.plugin_name, handle.info.aliases
    except AccelctlError:  # a broken accelerator_info() fails its own check
        kind, aliases = handle.plugin_name, ()
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
            readings.append(timed(handle.device_stats, form))
        except AccelctlError as exc:
            shown = f"{text!r} (a str)" if isinstance(form, str) else f"torch.device({text!r})"
            run.failed(check, f"{shown}: {strip_subject(one_line(exc), handle)}", exc)
            return
    prefixes = tuple(f"{name}." for name in (handle.plugin_name, *aliases))
    (stats, seconds), (by_text, text_seconds) = readings
    seconds = max(seconds, text_seconds)
    broken = list(dict.fromkeys(vocabulary_problems(stats, prefixes)))
    broken += [p for p in vocabulary_problems(by_text, prefixes) if p not in broken]
    if broken:
        run.failed(
            check,
            f"{'; '.join(broken)} (the vocabulary of accelctl.stats_keys: common keys, or "
            f"{prefixes[0]!r} and a unit suffix: _bytes, _percent, _watts, _celsius, _hz, "
            f"_per_second)",
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
            f"{len(stats)} figures on {device} (torch.device and str alike) in {ms(seconds)}: "
            f"{keys}{note}",
        )


def check_backend(handle: AcceleratorHandle, device: torch.device | None, run: Run) -> None:
    """Check that the declared ``distributed_backend`` exists in torch for the devices' type.

    A backend that cannot carry these tensors passes ``validate`` otherwise and fails in every rank
    of ``accelctl launch``."""
    check = "distributed_backend"
    run.start(check)
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
    elif problem.skip:
        run.skipped(check, problem.message)
    else:
        run.failed(
            check,
            f"distributed_backend={backend!r} {problem}; `accelctl launch --devices 2` would "
            f"fail in every rank. Declare the backend your torch extension registers for "
            f"{device.type!r} (torch.distributed.Backend.register_backend), or None for one "
            f"process only",
        )


def check_peak(handle: AcceleratorHandle, device: torch.device | None, run: Run) -> None:
    """Check that ``device_peak`` gives a plausible :class:`accelctl.DevicePeak` or None.

    For both forms of the first device: the same for both, quickly, in units that are plausibly
    FLOPs and bytes per second."""
    check = "device_peak"
    run.start(check)
    if not handle.implements(check):
        run.skipped(check, "not implemented (optional): the peak is unknown, no mfu")
        return
    if device is None:
        run.skipped(check, "needs a device from the devices_auto round trip, which failed")
        return
    answers: list[DevicePeak | None] = []
    seconds = 0.0
    for form in (device, str(device)):
        try:
            peak, took = timed(handle.device_peak, form)
        except AccelctlError as exc:
            shown = (
                f"{str(device)!r} (a str)"
                if isinstance(form, str)
                else f"torch.device({str(device)!r})"
            )
            run.failed(check, f"{shown}: {strip_subject(one_line(exc), handle)}", exc)
            return
        answers.append(peak)
        seconds = max(seconds, took)
    peak = answers[0]
    if answers[0] != answers[1]:
        run.failed(
            check, f"torch.device({str(device)!r}) and the str {str(device)!r} give different peaks"
        )
    elif seconds > STATS_CALL_LIMIT_S:
        run.failed(check, f"took {seconds:.2f} s (limit {STATS_CALL_LIMIT_S:g} s): never block")
    elif peak is None:
        run.passed(check, f"None on {device}: the peak is unknown (no mfu), said in {ms(seconds)}")
    else:
        slips = _peak_slips(peak)
        if slips:
            run.failed(check, "; ".join(slips))
        else:
            flops = ", ".join(f"{dtype} {value:.3g}" for dtype, value in peak.flops.items())
            run.passed(
                check,
                f"{device}: {flops or 'no FLOPs'} FLOP/s; bandwidth "
                f"{peak.memory_bandwidth_bytes_per_second or 'unknown'} B/s; source "
                f"{peak.source or 'not given'}",
            )


def _peak_slips(peak: DevicePeak) -> list[str]:
    low, high = PEAK_FLOPS_BOUNDS
    slips = [
        f"flops[{dtype!r}] = {value:g} is outside {low:g}..{high:g} FLOP/s per device: give "
        f"FLOPs per second (989e12, not 989 TFLOPs)"
        for dtype, value in peak.flops.items()
        if not low <= value <= high
    ]
    bandwidth = peak.memory_bandwidth_bytes_per_second
    low, high = PEAK_BANDWIDTH_BOUNDS
    if bandwidth is not None and not (math.isfinite(bandwidth) and low <= bandwidth <= high):
        slips.append(
            f"memory_bandwidth_bytes_per_second = {bandwidth:g} is outside {low:g}..{high:g}: "
            f"give bytes per second (3.35e12, not 3.35 TB/s)"
        )
    return slips

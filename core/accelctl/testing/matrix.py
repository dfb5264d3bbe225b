"""The capability matrix: what each installed accelerator's device can do for training.

Shown by ``accelctl validate --capabilities``: every row of
:data:`accelctl.capabilities.CAPABILITIES` probed in a fresh process of its own per plugin.

A probe runs torch on the device and may load a runtime, make a process group or crash in native
code, so it never runs in the caller's process: the child reports each row as a JSON line as soon
as it has it, on a copy of its stdout (what plugins print goes to its stderr). A child that
crashes or stops answering leaves the rows it finished; the row it was in says what happened, the
rest say they were not probed, and the command goes on with the other plugins.

Missing capabilities are facts, not failures. A report has *problems* (``accelctl validate
--capabilities`` exits 1) only where something is wrong: the plugin is broken, its probe crashed or
hung, or it declares what it cannot do (a ``distributed_backend`` on which ``ddp`` fails).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from accelctl import AccelctlError, AcceleratorHandle, AcceleratorStatus
from accelctl._base.text import describe_exception, one_line
from accelctl._host.registry import Registry, get_registry
from accelctl.capabilities import CAPABILITIES, FSDP_NEEDS, Capability, iter_capabilities

from .probes import fresh_interpreter_environment

#: Seconds each capability probe may take before its process is stopped and the row says so
#: (``accelctl validate --capabilities --timeout``).
PROBE_TIMEOUT_S = 120.0
#: Seconds the probe process may take to start: import torch, load the plugin, ``detect()`` (a
#: hang guard: a loaded machine has taken a minute to import torch and a backend).
START_TIMEOUT_S = 300.0
#: How many plugins are probed at once (each in its own process, each importing torch).
PARALLEL_PROBES = 4

ReportState = Literal["probed", "probe-failed", "unavailable", "disabled", "broken", "unknown"]


@dataclass(frozen=True)
class CapabilityReport:
    """One accelerator's row of the matrix.

    ``state``: ``"probed"`` (every capability has an answer), ``"probe-failed"`` (the probe process
    failed, crashed or hung: ``reason`` says how, and the rows it did not reach say so),
    ``"unavailable"`` / ``"disabled"`` / ``"broken"`` (as ``accelctl list`` has them; nothing
    probed, ``reason`` says why) or ``"unknown"`` (a name asked for that nothing installed has).
    ``device`` is the device probed (``"openreg:0"``); ``problems`` what makes the command exit 1.
    """

    name: str
    state: ReportState
    distribution: str | None = None
    version: str | None = None
    reason: str | None = None
    device: str | None = None
    distributed_backend: str | None = None
    capabilities: tuple[Capability, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when nothing is wrong (missing capabilities are not problems)."""
        return not self.problems

    @property
    def fsdp_gaps(self) -> tuple[Capability, ...] | None:
        """Return the rows of FSDP2's needs that the device lacks, or None.

        The rows of :data:`~accelctl.capabilities.FSDP_NEEDS` the device lacks (``()``: FSDP2
        can be tried); None unless every row was probed."""
        if self.state != "probed":
            return None
        return tuple(c for c in self.capabilities if c.name in FSDP_NEEDS and not c.supported)

    def capability(self, name: str) -> Capability:
        """The row ``name``; a ``KeyError`` names the rows there are."""
        for capability in self.capabilities:
            if capability.name == name:
                return capability
        known = ", ".join(c.name for c in self.capabilities) or f"none ({self.state})"
        raise KeyError(f"no capability {name!r} in the report of {self.name!r} (rows: {known})")

    def to_dict(self) -> dict[str, Any]:
        """Return the object ``--capabilities --json`` prints for this accelerator.

        Its fields are documented in docs/writing-a-plugin.md."""
        gaps = self.fsdp_gaps
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "state": self.state,
            "reason": self.reason,
            "device": self.device,
            "distributed_backend": self.distributed_backend,
            "passed": self.passed,
            "problems": list(self.problems),
            "fsdp": None if gaps is None else not gaps,
            "capabilities": [capability.to_dict() for capability in self.capabilities],
        }


# -- the parent: one fresh process per available plugin ---------------------------------------


def probe_installed(
    names: Iterable[str] | None = None,
    *,
    registry: Registry | None = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> list[CapabilityReport]:
    """Probe the capability matrix of the accelerators called ``names``, or of every installed one.

    ``names`` are names or aliases. Each available one is probed in a fresh process
    (:data:`PARALLEL_PROBES` at a time), the others reported as :func:`accelctl.list_accelerators`
    finds them, in the listing's order.

    :param timeout: seconds each capability probe may take (the process's start has
        :data:`START_TIMEOUT_S`).
    """
    registry = registry or get_registry()
    rows = registry.listing()
    chosen: list[tuple[str, AcceleratorStatus | None]]
    if names is None:
        chosen = [(row.plugin_name, row) for row in rows]
    else:
        by_name = {row.plugin_name: row for row in rows}
        for row in rows:  # aliases, where the listing read them
            for alias in row.info.aliases if row.info is not None else ():
                by_name.setdefault(alias, row)
        chosen, seen = [], set()
        for name in dict.fromkeys(name.strip().lower() for name in names):
            found = by_name.get(name)
            if found is None or found.plugin_name not in seen:  # a name and its alias: probed once
                chosen.append((name, found))
                seen.add(name if found is None else found.plugin_name)

    def report(item: tuple[str, AcceleratorStatus | None]) -> CapabilityReport:
        asked, row = item
        if row is None:
            why = one_line(registry.unknown(asked))
            return CapabilityReport(asked, "unknown", reason=why, problems=(why,))
        return _report_for(row, named=names is not None, timeout=timeout)

    workers = max(1, min(PARALLEL_PROBES, len(chosen)))
    with ThreadPoolExecutor(workers, thread_name_prefix="accelctl-capabilities") as pool:
        return list(pool.map(report, chosen))


def probe_accelerator(
    accelerator: object, *, registry: Registry | None = None, timeout: float = PROBE_TIMEOUT_S
) -> CapabilityReport:
    """Probe one accelerator's row of the capability matrix.

    An installed name or alias (or its handle) is probed in a fresh process, as
    :func:`probe_installed` does; a plugin object without an entry point (an
    :class:`accelctl.Accelerator` instance, a module of hooks), which a fresh process cannot import
    by name, probed in this process (which must have no process group)."""
    if isinstance(accelerator, AcceleratorHandle) and accelerator.entry_point is not None:
        accelerator = accelerator.plugin_name
    if isinstance(accelerator, str):
        return probe_installed([accelerator], registry=registry, timeout=timeout)[0]
    if isinstance(accelerator, AcceleratorHandle):
        handle = accelerator.load()
    else:
        handle = AcceleratorHandle.from_object(accelerator, check=False)
    if handle.state != "loaded":
        error = one_line(handle.error or f"{handle.plugin_name!r} is {handle.state}")
        return CapabilityReport(handle.plugin_name, "broken", reason=error, problems=(error,))
    try:
        detected = handle.detect()
        why = None if detected else handle.unavailable_reason() or "not detected"
    except AccelctlError as exc:
        error = one_line(exc)
        return CapabilityReport(handle.plugin_name, "broken", reason=error, problems=(error,))
    if why is not None:
        return CapabilityReport(handle.plugin_name, "unavailable", reason=why)
    return _report_of(handle, list(probe_here(handle)), None, None, "")


def _report_for(row: AcceleratorStatus, named: bool, timeout: float) -> CapabilityReport:
    handle = row.accelerator
    state = row.state
    if state == "available":
        return _probe_in_child(handle, timeout)
    if state == "disabled":
        problems = (f"{row.reason}; unset the variable to probe it",) if named else ()
        return CapabilityReport(
            row.plugin_name,
            "disabled",
            distribution=handle.distribution,
            version=handle.version,
            reason=row.reason,
            problems=problems,
        )
    if state == "broken" or state == "not-run":
        error = row.error or "the plugin did not answer"
        return CapabilityReport(
            row.plugin_name,
            "broken",
            distribution=handle.distribution,
            version=handle.version,
            reason=error,
            problems=(f"the plugin is broken: {error}",),
        )
    return CapabilityReport(
        row.plugin_name,
        "unavailable",
        distribution=handle.distribution,
        version=handle.version,
        reason=row.reason or "not detected",
    )


_CHILD = "from accelctl.testing.matrix import _child_main; _child_main()"


def _probe_in_child(handle: AcceleratorHandle, timeout: float) -> CapabilityReport:
    """Run :func:`_child_main` for ``handle`` in a fresh interpreter and read its rows.

    Rows are read as they come: each message within its deadline, else the process is stopped."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, handle.plugin_name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=fresh_interpreter_environment(),
        )
        try:
            messages, ended = _read_messages(process, timeout)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
        stderr.seek(0)
        tail = " ".join(stderr.read()[-2000:].split())[-600:]
    return _report_of(handle, messages, ended, process.returncode, tail)


def _read_messages(
    process: subprocess.Popen[str], timeout: float
) -> tuple[list[dict[str, Any]], str | None]:
    """The child's JSON messages, and None when it ended on its own, or why it was stopped."""
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def read(stream: Iterable[str]) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, args=(process.stdout,), daemon=True).start()
    messages: list[dict[str, Any]] = []
    while True:
        wait = START_TIMEOUT_S if not messages else timeout
        try:
            line = lines.get(timeout=wait)
        except queue.Empty:
            return messages, f"did not answer within {wait:g} s"
        if line is None:
            return messages, None
        try:
            message = json.loads(line)
        except ValueError:
            continue  # not ours (the child's stdout is its own; this is a guard only)
        if isinstance(message, dict):
            messages.append(message)


def _how_it_ended(returncode: int | None) -> str:
    if returncode is None or returncode == 0:
        return "ended early"
    if returncode < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _report_of(
    handle: AcceleratorHandle,
    messages: list[dict[str, Any]],
    stopped: str | None,
    returncode: int | None,
    stderr_tail: str,
) -> CapabilityReport:
    header = messages[0] if messages else {}
    if "error" in header:
        error = str(header["error"])
        return CapabilityReport(
            handle.plugin_name,
            "probe-failed",
            distribution=handle.distribution,
            version=handle.version,
            reason=error,
            problems=(f"the probe process could not start probing: {error}",),
        )
    rows = [
        Capability.from_dict(m) for m in messages[1:] if {"name", "supported", "reason"} <= m.keys()
    ]
    device, backend = header.get("device"), header.get("distributed_backend")
    problems: list[str] = []
    state: ReportState = "probed"
    reason = None
    if len(rows) < len(CAPABILITIES):
        state = "probe-failed"
        how = stopped or _how_it_ended(returncode)
        where = CAPABILITIES[len(rows)] if header else None
        reason = f"the probe process {how}" + (f" while probing {where}" if where else "")
        reason += f" (its last output: {stderr_tail})" if stderr_tail else ""
        problems.append(reason)
        if where is not None:
            rows.append(Capability(where, False, f"the probe process {how} here"))
            rows += [
                Capability(
                    name, False, f"not probed: the probe process {how} while probing {where}"
                )
                for name in CAPABILITIES[len(rows) :]
            ]
    ddp = next((c for c in rows if c.name == "ddp"), None)
    if backend and ddp is not None and not ddp.supported and state == "probed":
        problems.append(
            f"it declares distributed_backend {backend!r}, but ddp fails on it: {ddp.reason}"
        )
    return CapabilityReport(
        handle.plugin_name,
        state,
        distribution=handle.distribution,
        version=handle.version,
        reason=reason,
        device=None if device is None else str(device),
        distributed_backend=None if backend is None else str(backend),
        capabilities=tuple(rows),
        problems=tuple(problems),
    )


# -- the child ---------------------------------------------------------------------------------


def device_to_probe(handle: AcceleratorHandle) -> tuple[Any, str | None]:
    """Return the loaded plugin's first device, made current, and its declared backend.

    The device is made current with ``setup_device``; raises :class:`RuntimeError` saying why when
    the plugin is not detected here."""
    from accelctl.torch_build import import_torch

    import_torch()  # with the out-of-tree backends, as the CLI loads them
    if handle.detect() is not True:
        why = handle.unavailable_reason() or "no reason given"
        raise RuntimeError(f"detect() is False in the probe's process: {why}")
    device = handle.get_parallel_devices(handle.parse_devices(1))[0]
    handle.setup_device(device)
    return device, handle.info.distributed_backend


def probe_here(handle: AcceleratorHandle) -> Iterator[dict[str, Any]]:
    """Yield the child's messages for ``handle``: a header, then one per capability.

    ``handle`` is loaded; the header is ``device`` and ``distributed_backend``, or ``{"error"}``."""
    try:
        device, backend = device_to_probe(handle)
    except BaseException as exc:  # the plugin's failure, whatever it raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        yield {"error": one_line(describe_exception(exc))}
        return
    yield {"device": str(device), "distributed_backend": backend}
    for capability in iter_capabilities(device.type, backend, kernel_gaps=handle.kernel_gaps):
        yield capability.to_dict()


def _child_main() -> None:
    """Run the probe process, ``python -c ... NAME``.

    Its results go to a copy of stdout, one JSON line each; everything else written to stdout (a
    plugin, native code) goes to stderr."""
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    name = sys.argv[1]
    claimants = get_registry().claimants(name)
    if not claimants:
        messages: Iterable[dict[str, Any]] = [{"error": f"no plugin {name!r} is installed"}]
    else:
        handle = claimants[0].load()
        if handle.state != "loaded":
            error = handle.error or AccelctlError(f"{name!r} is {handle.state}")
            messages = [{"error": one_line(error)}]
        else:
            messages = probe_here(handle)
    for message in messages:
        results.write(json.dumps(message) + "\n")
        results.flush()

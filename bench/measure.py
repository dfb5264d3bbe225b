"""Timing child processes: wall time and peak memory per run, medians over interleaved repeats.

Every command runs as a fresh process, started by the small middleman :mod:`bench.spawn`, which
times it and reads its own peak memory. Repeats are interleaved, one round over every command at
a time, so that a slow spell of a shared machine spreads over all commands instead of skewing one
of them; each command runs once untimed first, to warm the page cache and write its bytecode.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SPAWN = Path(__file__).resolve().with_name("spawn.py")
_PROBE = Path(__file__).resolve().with_name("probe.py")


@dataclass(frozen=True)
class Command:
    """A command to time: a label for the tables and the argument vector of the child."""

    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    #: Exit statuses that count as success (an error path is timed on purpose sometimes).
    ok_status: tuple[int, ...] = (0,)


@dataclass
class Timing:
    """The repeats of one command: seconds and peak resident memory per run, and their medians."""

    label: str
    argv: list[str]
    seconds: list[float] = field(default_factory=list)
    max_rss_kib: list[int] = field(default_factory=list)
    #: The modules the last run imported, where :func:`measure` was asked to probe them.
    modules: set[str] | None = None

    @property
    def median_s(self) -> float:
        """Median wall time in seconds."""
        return statistics.median(self.seconds)

    @property
    def median_rss_mib(self) -> float:
        """Median peak resident memory in MiB."""
        return statistics.median(self.max_rss_kib) / 1024

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: medians first, then the raw repeats (milliseconds, KiB)."""
        return {
            "label": self.label,
            "argv": self.argv,
            "median_ms": round(self.median_s * 1000, 2),
            "median_max_rss_mib": round(self.median_rss_mib, 1),
            "runs_ms": [round(s * 1000, 2) for s in self.seconds],
        }


class ChildFailed(RuntimeError):
    """A benchmarked command exited with an unexpected status; the message shows its stderr."""


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the environment of every child: this one, made reproducible.

    Bytecode caching on (as for a user whose packages pip compiled at install time), no
    ``ACCELCTL_*`` choice leaking in, and torch's autoloading of out-of-tree backends off unless the
    caller set it.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ACCELCTL_") and key != "PYTHONDONTWRITEBYTECODE"
    }
    # torch loads every installed out-of-tree backend on import (the torch.backends group); the
    # test environment installs one (torch_openreg) for its own tests. Off, so that the figures
    # are those of a machine without one, `import torch` included.
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    env.update(extra or {})
    return env


def run_child(command: Command, modules: list[set[str]] | None = None) -> tuple[float, int, str]:
    """Run ``command`` once through :mod:`bench.spawn`: wall seconds, peak memory (KiB) and stdout.

    The peak is the command's own resident memory. With ``modules`` (a Python command only), the run
    goes through :mod:`bench.probe` too and the set of modules it imported is appended to it.

    :raises ChildFailed: the exit status is not one of ``command.ok_status``.
    """
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-run-") as tmp:
        report, probed = Path(tmp) / "report.json", Path(tmp) / "modules.json"
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        argv = command.argv
        if modules is not None:
            argv = (argv[0], str(_PROBE), str(probed), *argv[1:])
        with out_path.open("wb") as out, err_path.open("wb") as err:
            middleman = (sys.executable, "-S", "-I", str(_SPAWN), str(report), *argv)
            code = subprocess.call(middleman, stdout=out, stderr=err, env=child_env(command.env))
        stdout = out_path.read_text(errors="replace")
        if code not in command.ok_status or not report.is_file():
            stderr = err_path.read_text(errors="replace").strip()
            raise ChildFailed(
                f"{command.label!r} ({' '.join(command.argv)}) exited {code}: {stderr[-2000:]}"
            )
        figures = json.loads(report.read_text())
        if modules is not None:
            modules.append(set(json.loads(probed.read_text())))
    return float(figures["seconds"]), int(figures["max_rss_kib"]), stdout


def measure(
    commands: Sequence[Command], repeats: int, warmup: bool = True, probe: bool = False
) -> list[Timing]:
    """Time every command ``repeats`` times, interleaved; one untimed warm-up run each first.

    ``probe`` runs the Python commands through :mod:`bench.probe` as they are timed (their
    :attr:`Timing.modules`): one process for both figures, which a quick run (that only checks
    the suite works) wants; a full run probes in runs of their own (:func:`imported_modules`),
    so that the probe's own cost is in no figure.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    timings = [Timing(c.label, list(c.argv)) for c in commands]
    if warmup:
        for command in commands:
            run_child(command)
    for _ in range(repeats):
        for command, timing in zip(commands, timings, strict=True):
            modules: list[set[str]] | None = [] if probe and _is_python(command) else None
            seconds, rss, _ = run_child(command, modules)
            timing.seconds.append(seconds)
            timing.max_rss_kib.append(rss)
            if modules:
                timing.modules = modules[-1]
    return timings


def _is_python(command: Command) -> bool:
    return command.argv[0] == sys.executable and len(command.argv) > 1


def imported_modules(command: Command, timing: Timing | None = None) -> set[str]:
    """Return the modules a Python command imports.

    From an untimed run through :mod:`bench.probe`, or those its ``timing`` recorded already
    (:func:`measure` with ``probe``).

    ``command.argv`` must be ``(python, "-c", CODE, ...)`` or ``(python, SCRIPT, ...)``.
    """
    if timing is not None and timing.modules is not None:
        return timing.modules
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-probe-") as tmp:
        report = Path(tmp) / "modules.json"
        argv = (command.argv[0], str(_PROBE), str(report), *command.argv[1:])
        with tempfile.TemporaryFile() as err:
            code = subprocess.call(
                argv, stdout=subprocess.DEVNULL, stderr=err, env=child_env(command.env)
            )
            err.seek(0)
            stderr = err.read().decode(errors="replace")
        if code not in command.ok_status or not report.is_file():
            raise ChildFailed(f"{command.label!r} (probe) exited {code}: {stderr[-2000:]}")
        return set(json.loads(report.read_text()))


def python_argv(*args: str) -> tuple[str, ...]:
    """``sys.executable`` followed by ``args``."""
    return (sys.executable, *args)


def console_script(name: str) -> Path | None:
    """The console script ``name`` installed beside this interpreter, if there is one."""
    candidate = Path(sys.executable).parent / name
    return candidate if candidate.is_file() else None

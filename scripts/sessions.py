"""Run every nox session of noxfile.py, a few at a time.

What ``bash scripts/test`` does with no arguments (and CI's ``.ci/run``).

    python scripts/sessions.py            every session, ACCELCTL_TEST_SESSIONS_AT_ONCE at once (2)
    python scripts/sessions.py lint core  those sessions only

nox itself runs sessions one after the other, and a session's last minutes leave this 2-core
machine's CPU half idle: its last worker waits on its longest module (the real Ray cluster's runs,
the SLURM cluster), each session starts by building its environment (uv, mostly waiting on the
disk). Two sessions side by side fill those gaps (docs/design/test-command.md has the figures).
Each session's output goes to ``.nox/logs/<session>.log`` and is printed whole when the session
ends, so two sessions' lines never interleave; a line says when each starts. The last lines are
a summary as nox prints it; the exit status is 1 if any session failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".nox" / "logs"
#: How long to wait between looks at the running sessions (a poll, not a deadline).
POLL_S = 1.0


@dataclass
class Running:
    """A session started, its output going to ``log``."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)


def sessions(nox: list[str]) -> list[str]:
    """The names of the sessions ``nox`` runs by default, in the noxfile's order."""
    listed = subprocess.run([*nox, "--list", "--json"], capture_output=True, text=True, check=True)
    return [session["name"] for session in json.loads(listed.stdout)]


def start(nox: list[str], name: str) -> Running:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*nox, "--session", name], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
    print(f"nox > started {name} (output: {log.relative_to(ROOT)})", flush=True)
    return Running(name, process, log)


def main() -> int:
    nox = [sys.executable, "-m", "nox"]
    at_once = int(os.environ.get("ACCELCTL_TEST_SESSIONS_AT_ONCE", "2"))
    if at_once < 1:
        raise SystemExit(f"ACCELCTL_TEST_SESSIONS_AT_ONCE={at_once}: give 1 or more")
    waiting = sys.argv[1:] or sessions(nox)
    running: list[Running] = []
    results: list[tuple[str, int, float]] = []
    began = time.monotonic()
    while waiting or running:
        while waiting and len(running) < at_once:
            running.append(start(nox, waiting.pop(0)))
        time.sleep(POLL_S)
        for session in [s for s in running if s.process.poll() is not None]:
            running.remove(session)
            took = time.monotonic() - session.started
            sys.stdout.write(session.log.read_text(errors="replace"))
            sys.stdout.flush()
            results.append((session.name, session.process.returncode, took))
    print("nox > Ran multiple sessions:")
    for name, code, took in results:
        print(f"nox > * {name}: {'success' if code == 0 else 'failed'}, took {took:.0f} s")
    print(f"nox > {len(results)} sessions in {time.monotonic() - began:.0f} s, {at_once} at once")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

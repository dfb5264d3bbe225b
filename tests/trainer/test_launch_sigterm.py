"""A SIGTERM or Ctrl-C to ``accelctl launch`` at any moment is its one line and ``128 + signal``.

Also after its processes ended (while torchrun shuts down, while the launcher cleans up): never a
silent death or a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: A hang guard only: a launch of one or two processes that print a line; nothing is timed.
LAUNCH_TIMEOUT_S = 300


def launch_signalled_after_the_workers(
    tmp_path: Path, devices: str, signum: int
) -> tuple[int, str]:
    """Launch a script that only prints; the launcher signals itself ``signum`` after the workers.

    Once the workers ended, before ``launch_script`` returns.
    """
    script = tmp_path / "done.py"
    script.write_text("print('worker done', flush=True)\n")
    driver = textwrap.dedent(
        f"""
        import os, runpy, sys, time
        import accelctl._launching.scripts as scripts

        launch = scripts._launch

        def then_signalled(*args, **kwargs):
            launch(*args, **kwargs)  # every worker has ended
            os.kill(os.getpid(), {int(signum)})
            time.sleep(30)  # the signal's handler runs before this ends

        scripts._launch = then_signalled
        sys.argv = ["accelctl", "launch", "--cpu", "--devices", {devices!r}, {str(script)!r}]
        runpy.run_module("accelctl", run_name="__main__")
        """
    )
    done = run_driver(tmp_path, driver)
    return done.returncode, done.stderr


def run_driver(tmp_path: Path, driver: str) -> subprocess.CompletedProcess[str]:
    """``python -c driver`` in ``tmp_path``, without this environment's ``ACCELCTL_*``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELCTL_")}
    return subprocess.run(
        [sys.executable, "-c", driver],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=LAUNCH_TIMEOUT_S,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("devices", ["1", "2"], ids=["one-process", "torchrun"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_after_the_workers_ended_is_the_launchers_line(
    tmp_path: Path, devices: str, signum: signal.Signals
) -> None:
    code, stderr = launch_signalled_after_the_workers(tmp_path, devices, signum)
    how = "Ctrl-C" if signum == signal.SIGINT else signum.name
    assert code == 128 + signum, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        f"accelctl launch: interrupted by {how} after the launched processes had ended"
    )


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_accelerator_is_chosen_is_the_launchers_line(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # Before any process starts (a plugin's detect() taking its time, say): the same line.
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('never started')\n")
    driver = textwrap.dedent(
        f"""
        import os, runpy, sys, time
        import accelctl.cli.launch_cmd as launch_cmd

        def choosing(*args, **kwargs):
            os.kill(os.getpid(), {int(signum)})
            time.sleep(30)  # the signal's handler runs before this ends

        launch_cmd.resolve_in_time = choosing
        sys.argv = ["accelctl", "launch", "--cpu", "--devices", "2", {str(script)!r}]
        runpy.run_module("accelctl", run_name="__main__")
        """
    )
    done = run_driver(tmp_path, driver)
    how = "Ctrl-C" if signum == signal.SIGINT else signum.name
    assert done.returncode == 128 + signum, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "never started" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"accelctl launch: interrupted by {how} before any process was started"
    )

"""More CPU processes than cores: one warning before any process starts, never a refusal.

From ``accelctl launch`` and ``accelctl.launch`` alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cliharness import HANG_GUARD_S

import accelctl
from accelctl._launching.cores import cpu_oversubscription

#: Runs ``accelctl ARGS`` (or, with ``--function``, ``accelctl.launch``) in a process that may
#: use one core only, as on a one-core machine.
ONE_CORE = """
import os, sys, warnings
os.sched_setaffinity(0, {0})
if sys.argv[1] == "--function":
    warnings.simplefilter("error")  # the warning stops the launch before processes start
    import accelctl
    try:
        accelctl.launch(print, "a process started", accelerator="cpu", devices=2)
    except UserWarning as warning:
        print(f"warned: {warning}")
    else:
        print("launched without a warning")
else:
    from accelctl.cli.main import main
    sys.argv[0] = "accelctl"
    main()
"""

needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="needs a settable CPU affinity (Linux)"
)


def on_one_core(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ONE_CORE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=HANG_GUARD_S,
    )


def test_the_warning_names_the_count_the_cores_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    crowded = accelctl.resolve("cpu", 3)
    message = cpu_oversubscription(crowded, option="--devices ")
    assert message is not None
    assert message.startswith("3 CPU processes were asked for, but this machine has 2 cores")
    assert "use --devices 2 or fewer" in message
    assert cpu_oversubscription(accelctl.resolve("cpu", 2), option="--devices ") is None


@pytest.mark.slow
@needs_affinity
def test_launch_warns_before_the_processes_start_and_still_starts_them(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    # One write of the whole line: two processes' print() calls (text, then newline) interleave.
    script.write_text("import os\nos.write(2, b'a process started\\n')\n")
    done = on_one_core("launch", "--cpu", "--devices", "2", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    warning = (
        "accelctl launch: warning: 2 CPU processes were asked for, but this machine has 1 core: "
        "they will share them and train slower than 1 would; use --devices 1 or fewer"
    )
    [at] = [i for i, line in enumerate(lines) if line.startswith(warning)]
    started = [i for i, line in enumerate(lines) if line == "a process started"]
    assert len(started) == 2 and at < min(started), done.stderr  # said first, not a refusal


@pytest.mark.slow
@needs_affinity
def test_the_function_launcher_warns_before_the_processes_start(tmp_path: Path) -> None:
    done = on_one_core("--function", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "warned: 2 CPU processes were asked for, but this machine has 1 core: they will share "
        "them and train slower than 1 would; use devices=1 or fewer (more processes than cores "
        "only serves to try a multi-process set-up)"
    )


def test_the_warning_is_python_s_own_on_the_caller_s_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accelctl._launching.cores import warn_cpu_oversubscription

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    with pytest.warns(UserWarning, match="use devices=1 or fewer") as caught:
        warn_cpu_oversubscription(accelctl.resolve("cpu", 2))
    assert caught[0].filename == __file__

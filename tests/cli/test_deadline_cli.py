"""The CLI and a plugin whose hook never answers: reported as broken, and the command ends.

The subprocess tests run the real ``accelctl`` with the deadline at 1 s; their ``timeout`` is a
hang guard (a stuck CLI fails the test instead of hanging the run), far above what they take.
"""

from __future__ import annotations

import importlib
import json
import subprocess
from collections.abc import Iterator

import pytest
from cliharness import Cli

from fakedists import FakeSite

HANG_GUARD_S = 120

#: The deadline these tests set. A working plugin in the same run must answer within it even on a
#: loaded 2-core machine, so it is generous; the hung plugin never answers, so only the tests'
#: length grows with it (each waits for it once).
DEADLINE_S = 3


@pytest.fixture
def hung_site(fake_site: FakeSite) -> FakeSite:
    """Install ``hung`` (detect() never returns) beside ``good``, for the fresh interpreters only.

    ``hung``'s thread never ends and it would win "auto"; ``good`` answers.
    """
    fake_site.install("acme-hung", {"hung": "fakeplugins.hostile:DetectNeverReturns"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    return fake_site


def hung_run(cli: Cli, site: FakeSite, *args: str) -> subprocess.CompletedProcess[str]:
    """``accelctl ARGS`` in a fresh interpreter, with the deadline of these tests."""
    env = {"ACCELCTL_HOOK_TIMEOUT": str(DEADLINE_S), "ACCELCTL_PLUGINS": "cpu,hung,good"}
    return cli.process(*args, path=site.path, env=env, timeout=HANG_GUARD_S)


@pytest.mark.slow
def test_list_json_ends_with_the_hung_plugin_broken(cli: Cli, hung_site: FakeSite) -> None:
    done = hung_run(cli, hung_site, "list", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["good"]["available"] is True and rows["cpu"]["available"] is True
    assert rows["hung"]["available"] is None
    assert f"detect() did not answer within {DEADLINE_S} s" in rows["hung"]["error"]


@pytest.mark.slow
def test_resolve_auto_skips_the_hung_plugin_and_ends(cli: Cli, hung_site: FakeSite) -> None:
    done = hung_run(cli, hung_site, "resolve", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["accelerator"] == "good"
    assert "warning: skipping accelerator 'hung'" in done.stderr
    assert f"detect() did not answer within {DEADLINE_S} s" in done.stderr


@pytest.mark.slow
def test_resolve_of_the_hung_plugin_is_a_one_line_error(cli: Cli, hung_site: FakeSite) -> None:
    done = hung_run(cli, hung_site, "resolve", "--accelerator", "hung")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "error: accelerator 'hung' (acme-hung 1.0): detect() did not answer" in done.stderr


@pytest.fixture
def gate(fake_site: FakeSite) -> Iterator[FakeSite]:
    """The fake site, whose waiting plugins (``fakeplugins.waiting``) go on when the test ends."""
    module = importlib.import_module("fakeplugins.gate")
    yield fake_site
    module.OPEN.set()


@pytest.mark.slow
def test_stats_reports_a_device_that_does_not_answer(
    cli: Cli, gate: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,hung")
    gate.install("acme-hung", {"hung": "fakeplugins.waiting:WaitsInDeviceStats"})
    result = cli("stats", "--json")
    assert result.exit_code == 1
    readings = {entry["accelerator"]: entry for entry in json.loads(result.stdout)}
    assert readings["cpu"]["error"] is None and readings["cpu"]["stats"]
    assert f"device_stats() did not answer within {DEADLINE_S} s" in readings["hung"]["error"]


@pytest.mark.slow
def test_validate_fails_a_detect_that_does_not_answer(
    cli: Cli, gate: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    gate.install("acme-hung", {"hung": "fakeplugins.waiting:WaitsInDetect"})
    result = cli("validate", "hung", "--json")
    assert result.exit_code == 1
    [report] = json.loads(result.stdout)
    checks = {check["check"]: check for check in report["checks"]}
    assert checks["detect_returns_bool"]["status"] == "fail"
    assert (
        f"detect() did not answer within {DEADLINE_S} s" in checks["detect_returns_bool"]["detail"]
    )

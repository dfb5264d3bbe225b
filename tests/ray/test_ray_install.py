"""How the Ray tests wait for Ray Train, which ``scripts/test`` installs beside the venv while the
tests run (``besidevenv.wait_for_install``): the install's folder is taken only once marked
ready; a failed, interrupted or never-started install skips the tests, and fails them under CI."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from besidevenv import wait_for_install


@pytest.fixture
def not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def _no_such_process() -> int:
    """A process id no process has (ids stay below the kernel's pid_max)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def test_a_folder_marked_ready_is_taken(tmp_path: Path, not_ci: None) -> None:
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / ".accelctl-ready").touch()
    assert wait_for_install(tmp_path / "ray", "ray") == tmp_path / "ray"


def test_the_tests_wait_while_the_install_runs(tmp_path: Path, not_ci: None) -> None:
    partial = tmp_path / "ray.partial"
    partial.mkdir()
    (partial / ".accelctl-installing").write_text(str(os.getpid()))  # a process that runs

    def complete() -> None:  # what scripts/test's install does last
        (partial / ".accelctl-installing").unlink()
        (partial / ".accelctl-ready").touch()
        partial.rename(tmp_path / "ray")

    timer = threading.Timer(0.2, complete)
    timer.start()
    try:
        assert wait_for_install(tmp_path / "ray", "ray") == tmp_path / "ray"
    finally:
        timer.join()


def test_a_folder_without_the_mark_is_never_taken(tmp_path: Path, not_ci: None) -> None:
    partial = tmp_path / "ray.partial"  # an install that was interrupted
    (partial / "ray").mkdir(parents=True)
    (partial / ".accelctl-installing").write_text(str(_no_such_process()))
    (tmp_path / "ray" / "ray").mkdir(parents=True)  # and a folder there, unmarked
    with pytest.raises(pytest.skip.Exception, match=r"^installing ray into .* was interrupted"):
        wait_for_install(tmp_path / "ray", "ray")
    partial.rename(tmp_path / "elsewhere")  # and with no install at all
    with pytest.raises(pytest.skip.Exception, match=r"ray is not installed in .*bash scripts/test"):
        wait_for_install(tmp_path / "ray", "ray")


def test_a_failed_install_skips_naming_its_log(tmp_path: Path, not_ci: None) -> None:
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / ".accelctl-failed").write_text("error: no network\n")
    with pytest.raises(pytest.skip.Exception) as skipped:
        wait_for_install(tmp_path / "ray", "ray")
    folder = tmp_path / "ray"
    assert (
        str(skipped.value)
        == f"installing ray into {folder} failed: its log is {folder}/.accelctl-failed"
    )


def test_under_ci_a_missing_install_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="ray is not installed in"):
        wait_for_install(tmp_path / "ray", "ray")

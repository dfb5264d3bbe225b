"""What a new user meets first on the command line (issue 26, item 6): ``stats`` exits alike for
every plugin and for one with the same broken plugin; the ``list`` table shows aliases (the
generic PrivateUse1 plugin's ``openreg``); a suggestion ending in ``?`` is not followed by a
second full stop."""

from __future__ import annotations

import json

import pytest
from cliharness import Cli

from fakedists import FakeSite, good_plugin


@pytest.fixture
def broken_and_cpu(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site.install("acme-broken", {"broken": "first_hour_broken"},
                      {"first_hour_broken": "import nope_first_hour"})  # fmt: skip
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,broken")


def test_stats_exits_1_for_a_broken_plugin_named_or_not(cli: Cli, broken_and_cpu: None) -> None:
    every = cli("stats", "--json")
    named = cli("stats", "broken", "--json")
    assert (every.exit_code, named.exit_code) == (1, 1)
    entries = {e["accelerator"]: e for e in json.loads(every.stdout)}
    assert entries["cpu"]["error"] is None and entries["cpu"]["stats"]
    assert "nope_first_hour" in entries["broken"]["error"]
    assert "nope_first_hour" in named.stderr


def test_stats_table_shows_the_broken_plugin_with_its_error(cli: Cli, broken_and_cpu: None) -> None:
    result = cli("stats")
    assert result.exit_code == 1
    assert "? (broken): error: " in result.stdout and "nope_first_hour" in result.stdout


def test_the_list_table_shows_aliases_after_the_name(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-slot", {"slot": "first_hour_slot"},
                      {"first_hour_slot": good_plugin("slot", aliases=("twinreg",))})  # fmt: skip
    lines = cli("list").stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.strip()}
    assert rows["slot"][:4] == ["slot", "(twinreg)", "yes", "2"]
    assert rows["cpu"][:3] == ["cpu", "yes", "1"]


def test_a_suggestion_keeps_its_question_mark_alone(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_ACCELERATOR", "cpuu")
    result = cli("resolve")
    assert result.exit_code == 1
    assert "Did you mean 'cpu'? Unset ACCELCTL_ACCELERATOR" in result.stderr
    assert "?." not in result.stderr


def test_stats_says_why_a_device_has_no_figures(cli: Cli, fake_site: FakeSite) -> None:
    # As the generic PrivateUse1 plugin in `accelctl stats`: it reads torch's allocator only in
    # the process that uses the device, never starting the backend's runtime to read it.
    source = """
        import accelctl

        class QuietAccelerator(accelctl.Accelerator):
            def detect(self):
                return True

            def auto_device_count(self):
                return 1
    """
    fake_site.install("acme-quiet", {"quiet": "first_hour_quiet:QuietAccelerator"},
                      {"first_hour_quiet": source})  # fmt: skip
    result = cli("stats", "quiet")
    assert result.exit_code == 0
    assert "quiet:0 (quiet): no figures from this process; an allocator counts per process" in (
        result.stdout
    )

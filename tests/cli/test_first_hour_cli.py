"""What a new user meets first on the command line: ``stats`` exits, ``list`` aliases, suggestions.

``stats`` exits alike for every plugin and for one with the same broken plugin; the ``list`` table
shows aliases (the generic PrivateUse1 plugin's ``openreg``); a suggestion ending in ``?`` is not
followed by a second full stop.
"""

from __future__ import annotations

import json

import pytest
from cliharness import Cli

from fakedists import FakeSite


@pytest.fixture
def broken_and_cpu(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site.install("acme-broken", {"broken": "fakeplugins.lacks_runtime"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,broken")


def test_stats_exits_1_for_a_broken_plugin_named_or_not(cli: Cli, broken_and_cpu: None) -> None:
    every = cli("stats", "--json")
    named = cli("stats", "broken", "--json")
    assert (every.exit_code, named.exit_code) == (1, 1)
    entries = {e["accelerator"]: e for e in json.loads(every.stdout)}
    assert entries["cpu"]["error"] is None and entries["cpu"]["stats"]
    assert "vendor_runtime_that_is_missing" in entries["broken"]["error"]
    assert "vendor_runtime_that_is_missing" in named.stderr


def test_stats_table_shows_the_broken_plugin_with_its_error(cli: Cli, broken_and_cpu: None) -> None:
    result = cli("stats")
    assert result.exit_code == 1
    assert (
        "? (broken): error: " in result.stdout and "vendor_runtime_that_is_missing" in result.stdout
    )


def test_the_list_table_shows_aliases_after_the_name(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-slot", {"slot": "fakeplugins.good:TwinregAlias"})
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
    fake_site.install("acme-quiet", {"quiet": "fakeplugins.classy:Minimal"})
    result = cli("stats", "quiet")
    assert result.exit_code == 0
    assert "quiet:0 (quiet): no figures from this process; an allocator counts per process" in (
        result.stdout
    )

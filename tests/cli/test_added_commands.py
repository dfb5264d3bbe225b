"""Commands that installed distributions add through the ``accelctl.commands`` entry points.

One that runs, broken ones that never take the CLI down, one that would shadow a built-in, and the
conformance kit's ``validate``, which arrives the same way (accelctl.cli._contributed). The
distributions are real ``.dist-info`` folders on ``sys.path`` (the ``fake_site`` fixture).
"""

from __future__ import annotations

import sys

import pytest
from cliharness import Cli

from fakedists import FakeSite

GROUP = "accelctl.commands"


@pytest.fixture
def hello(fake_site: FakeSite) -> FakeSite:
    fake_site.install("acme-tools", {"hello": "fakeplugins.greeting:hello"}, group=GROUP)
    return fake_site


def test_a_distribution_adds_a_command_that_runs(cli: Cli, hello: FakeSite) -> None:
    result = cli("hello", "world", "--shout")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "HELLO WORLD\n", "")
    listing = cli("--help")
    assert listing.exit_code == 0
    assert "hello " in listing.stdout and "Greet WHO" in listing.stdout
    assert "In capitals." in cli("hello", "--help").stdout
    near = cli("helo", "x")  # a usage error that suggests the added command too
    assert near.exit_code == 2
    assert "No such command 'helo'. Did you mean 'hello'?" in near.stderr


def test_validate_is_the_conformance_kits_command_found_through_the_group(cli: Cli) -> None:
    from accelctl.cli.main import COMMANDS

    assert "validate" not in COMMANDS  # the core's CLI does not name it
    listing = cli("--help")
    assert "validate " in listing.stdout and "conformance checks" in listing.stdout
    assert "conformance checks" in cli("validate", "--help").stdout
    document = cli.json("validate", "cpu")
    assert [report["name"] for report in document] == ["cpu"]
    near = cli("valdate")
    assert near.exit_code == 2
    assert "No such command 'valdate'. Did you mean 'validate'?" in near.stderr


#: kind -> the entry point of a command that cannot load
BROKEN = {
    "raises": "fakeplugins.refuses_import:hello",
    "exits": "fakeplugins.exits_at_import:hello",
    "missing-attr": "fakeplugins.greeting:nothing_here",
    "not-a-command": "fakeplugins.greeting:plain",
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_command_that_cannot_load_is_listed_and_its_run_says_why(
    cli: Cli, fake_site: FakeSite, kind: str
) -> None:
    fake_site.install("acme-broken", {"broken": BROKEN[kind]}, group=GROUP)
    listing = cli("--help")  # the listing still works, and lists it
    assert listing.exit_code == 0
    assert "broken " in listing.stdout and "list " in listing.stdout
    for args in (("broken",), ("broken", "--help"), ("broken", "--json", "x")):
        result = cli(*args)
        assert result.exit_code == 1, args
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(
            f"error: command 'broken' of acme-broken 1.0 (entry point '{BROKEN[kind]}') "
        )
        assert lines[0].endswith("; reinstall or uninstall acme-broken")
    cause = cli("broken").stderr
    expected = {
        "raises": "failed to load: ImportError: libhabana.so not found;",
        "exits": "failed to load: SystemExit: vendor runtime missing;",
        "missing-attr": "failed to load: AttributeError:",
        "not-a-command": "is a function, not a click command;",
    }[kind]
    assert expected in cause
    assert cli("list", "--json").exit_code == 0  # the others are unaffected


def test_debug_shows_the_import_failure_traceback(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-broken", {"broken": "fakeplugins.refuses_import:hello"}, group=GROUP)
    result = cli("--debug", "broken")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "refuses_import.py" in result.stderr


def test_a_damaged_entry_points_file_breaks_only_its_command(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install_raw(
        "acme-damaged", {"entry_points.txt": "[accelctl.commands]\nbroken = acme:cmd\nnot a line\n"}
    )
    assert cli("--help").exit_code == 0
    result = cli("broken")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: command 'broken' of acme-damaged 1.0 (entry point 'acme:cmd') cannot be loaded: "
        "cannot read the entry points of distribution acme_damaged"
    )
    assert "line 3 ('not a line') is not 'name = value'" in result.stderr


def test_a_name_two_distributions_claim_runs_neither(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-one", {"hello": "fakeplugins.greeting:hello"}, group=GROUP)
    fake_site.install("acme-two", {"hello": "fakeplugins.greeting:plain"}, group=GROUP)
    result = cli("hello", "world")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: command 'hello' of acme-one 1.0 (entry point 'fakeplugins.greeting:hello') and "
        "command 'hello' of acme-two 1.0 (entry point 'fakeplugins.greeting:plain') claim one "
        "name; uninstall one of them"
    ]
    assert "fakeplugins.greeting" not in sys.modules  # neither imported


def test_a_command_named_like_a_built_in_is_refused_with_a_warning(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install("acme-shadow", {"list": "fakeplugins.greeting:hello"}, group=GROUP)
    warning = (
        "warning: command 'list' of acme-shadow 1.0 (entry point 'fakeplugins.greeting:hello') "
        "is ignored: 'list' is a built-in command of accelctl; rename the entry point"
    )
    listing = cli("--help")
    assert listing.exit_code == 0
    assert warning in listing.stderr.splitlines()
    # The built-in runs, and never pays for the scan: no warning, nothing of the package loaded.
    result = cli("list", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    assert "fakeplugins.greeting" not in sys.modules
    unknown = cli("lst")  # an unknown name reads the group: the warning, and the suggestion
    assert unknown.exit_code == 2
    assert warning in unknown.stderr.splitlines()
    assert "No such command 'lst'. Did you mean 'list'?" in unknown.stderr

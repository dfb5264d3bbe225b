"""The CLI against hostile plugins and packages, through click's CliRunner.

Every ``--json`` is parsed strictly, and what accelctl prints from others is one clean, bounded
line.
"""

from __future__ import annotations

import pytest
from click.testing import Result
from cliharness import Cli, strict_json

from fakedists import FakeSite


def _no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output and "internal error" not in result.output


# -- 1. one malformed distribution breaks nothing else ----------------------------------------


@pytest.fixture
def malformed_site(fake_site: FakeSite) -> FakeSite:
    # torch reads every distribution's entry points when it is first imported (its device
    # backend autoload) and fails on a malformed one: that is torch's to fix, not accelctl's.
    import torch  # noqa: F401

    fake_site.install_raw("unrelated", {"entry_points.txt": "[console_scripts]\nno-equals-sign\n"})
    fake_site.install_raw(
        "acme-latin",
        {
            "METADATA": b"Metadata-Version: 2.1\nName: acme-latin\nVersion: 1.0\nSummary: \xff\n",
            "entry_points.txt": "[accelctl.accelerators]\nlatin = fakeplugins.marked\n",
        },
    )
    return fake_site


@pytest.mark.parametrize("args", [("list",), ("list", "--no-detect")], ids=["detect", "no-detect"])
def test_list_survives_malformed_distributions(
    cli: Cli, malformed_site: FakeSite, args: tuple[str, ...]
):
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in strict_json(result.stdout)}
    assert rows["cpu"]["state"] in ("available", "not-run")
    assert rows["latin"]["state"] == "broken"
    assert "acme_latin-1.0.dist-info/METADATA" in rows["latin"]["error"]
    assert "warning: skipping a broken distribution: cannot read the entry points of " in (
        result.stderr
    )
    table = cli(*args)
    assert table.exit_code == 0 and "latin: error: accelerator 'latin'" in table.stdout


@pytest.mark.slow  # as a user types it: plugins are asked in a child only from a one-thread process
def test_resolve_survives_malformed_distributions(cli: Cli, malformed_site: FakeSite):
    done = cli.process("resolve", "--accelerator", "cpu", "--json", path=malformed_site.path)
    assert done.returncode == 0, done.stderr
    assert strict_json(done.stdout)["accelerator"] == "cpu"
    result = cli.process("resolve", "--accelerator", "latin", path=malformed_site.path)
    assert result.returncode == 1
    # Each command scans afresh (its plugins are asked in a process of their own): the warning
    # about the unrelated distribution comes again, then the one-line error.
    warning, error = result.stderr.splitlines()
    assert warning.startswith("warning: skipping a broken distribution: cannot read the entry ")
    assert error.startswith("error: accelerator 'latin' (acme_latin): cannot read the")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


# -- 2. what plugins print stays off stdout ---------------------------------------------------


@pytest.fixture
def chatty_site(fake_site: FakeSite) -> FakeSite:
    """``chatty`` prints when imported and when asked."""
    fake_site.install("acme-chatty", {"chatty": "fakeplugins.chatty:ChattyAccelerator"})
    return fake_site


@pytest.mark.slow  # as a user types it: plugins are asked in a child only from a one-thread process
@pytest.mark.parametrize(
    "args",
    [
        ("list", "--json"),
        ("resolve", "--accelerator", "chatty", "--json"),
        ("env", "--json"),
        ("stats", "chatty", "--json"),
    ],
    ids=["list", "resolve", "env", "stats"],
)
def test_json_stays_valid_when_a_plugin_prints(
    cli: Cli, chatty_site: FakeSite, args: tuple[str, ...]
):
    done = cli.process(*args, path=chatty_site.path, env={"ACCELCTL_PLUGINS": "chatty"})
    assert done.returncode == 0, done.stderr
    strict_json(done.stdout)
    assert "hello from import" in done.stderr and "hello from detect" in done.stderr
    assert "hello" not in done.stdout


@pytest.mark.slow  # as a user types it: plugins are asked in a child only from a one-thread process
def test_what_a_plugins_own_thread_prints_stays_off_stdout(cli: Cli, fake_site: FakeSite):
    fake_site.install("acme-t", {"threaded": "fakeplugins.hostile:DetectPrintsFromAThread"})
    done = cli.process("list", "--json", path=fake_site.path, env={"ACCELCTL_PLUGINS": "threaded"})
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in strict_json(done.stdout)}
    assert rows["threaded"]["state"] == "available"
    assert "hello from a thread" in done.stderr


@pytest.mark.slow  # validate probes the plugin's import in a fresh interpreter
def test_validate_json_stays_valid_when_a_plugin_prints(cli: Cli, chatty_site: FakeSite):
    done = cli.process("validate", "chatty", "--json", path=chatty_site.path)
    strict_json(done.stdout)
    assert "hello from import" in done.stderr


# -- 3. BaseException from plugins -------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry_point", "expected"),
    [
        (
            "fakeplugins.vanishes",
            "importing 'fakeplugins.vanishes' failed: Vanish: gone at import",
        ),
        (
            "fakeplugins.hostile:DetectRaisesGeneratorExit",
            "hook detect() raised GeneratorExit: closing",
        ),
        (
            "fakeplugins.hostile:DetectRaisesKeyboardInterrupt",
            "hook detect() raised KeyboardInterrupt: not the user (raised by the plugin's own "
            "code, not by Ctrl-C)",
        ),
        (
            "fakeplugins.hostile:DetectRaisesUnprintable",
            "hook detect() raised Mute: <str() failed: RuntimeError>",
        ),
    ],
    ids=["base-exception-at-import", "generator-exit", "keyboard-interrupt", "str-raises"],
)
def test_base_exceptions_are_named_never_a_traceback(
    cli: Cli, fake_site: FakeSite, entry_point: str, expected: str
):
    fake_site.install("acme-odd", {"odd": entry_point})
    listed = cli("list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in strict_json(listed.stdout)}
    assert rows["odd"]["state"] == "broken" and expected in rows["odd"]["error"]
    assert rows["cpu"]["state"] == "available"
    result = cli("resolve", "--accelerator", "odd")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: accelerator 'odd' (acme-odd 1.0): ")
    assert expected in result.stderr and "Aborted!" not in result.output
    _no_traceback(result)
    auto = cli("resolve", "--json")  # "auto" skips it, loudly
    assert auto.exit_code == 0 and strict_json(auto.stdout)["accelerator"] == "cpu"
    assert "warning: skipping accelerator 'odd'" in auto.stderr


def test_a_real_ctrl_c_during_a_hook_still_aborts_the_command(cli: Cli, fake_site: FakeSite):
    fake_site.install("acme-slow", {"slow": "fakeplugins.hostile:DetectSendsCtrlC"})
    # The hook deadline must not decide this test on a loaded machine: far above the sleep.
    result = cli("resolve", "--accelerator", "slow", env={"ACCELCTL_HOOK_TIMEOUT": "600"})
    assert result.exit_code == 1 and "Aborted!" in result.output
    assert "error:" not in result.output  # the user's Ctrl-C, not the plugin's failure


# -- 4. strict JSON ----------------------------------------------------------------------------


def test_stats_json_writes_null_for_nan_and_infinity(cli: Cli, fake_site: FakeSite):
    fake_site.install("acme-odd", {"odd": "fakeplugins.hostile:NonFiniteStats"})
    result = cli("stats", "odd", "--json")
    assert result.exit_code == 0, result.output
    readings = strict_json(result.stdout)
    assert readings[0]["stats"] == {
        "memory_used_bytes": None,
        "power_watts": None,
        "memory_total_bytes": None,
        "odd.fine": 0.5,
    }
    table = cli("stats", "odd")
    assert table.exit_code == 0 and "nan" not in table.stdout.lower()


# -- 5. text from plugins and users ------------------------------------------------------------

ESCAPE = "\x1b]0;pwned\x07"


def test_escape_sequences_and_huge_errors_never_reach_the_terminal(cli: Cli, fake_site: FakeSite):
    fake_site.install("acme-pwn", {"pwn": "fakeplugins.hostile:EscapedDescription"})
    fake_site.install("acme-loud", {"loud": "fakeplugins.hostile:DetectRaisesHugeEscapedError"})
    table = cli("list")
    assert table.exit_code == 0
    assert "\x1b" not in table.output and "\x07" not in table.output
    assert "pwn \\x1b]0;pwned\\x07 accelerator" in table.stdout
    assert max(len(line) for line in table.output.splitlines()) < 5000
    listed = cli("list", "--json")
    rows = {row["name"]: row for row in strict_json(listed.stdout)}
    assert rows["pwn"]["description"] == f"pwn {ESCAPE} accelerator"  # JSON escapes it itself
    assert len(listed.stdout) < 50_000
    result = cli("resolve", "--accelerator", "loud")
    assert result.exit_code == 1 and len(result.stderr) < 5000
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "RuntimeError: \\x1b]0;pwned\\x07xxx" in result.stderr


def test_a_huge_accelctl_accelerator_gives_a_bounded_escaped_error(cli: Cli):
    result = cli("resolve", env={"ACCELCTL_ACCELERATOR": "\x1b[31m" + "y" * 100_000})
    assert result.exit_code == 1
    assert len(result.stderr) < 2000 and result.stderr.count("\n") == 1
    assert "\x1b" not in result.stderr
    assert result.stderr.startswith("error: ACCELCTL_ACCELERATOR='\\x1b[31myyy")
    assert "more characters" in result.stderr


@pytest.mark.parametrize("name", ["gpu:0", "", "../x", "x; rm -rf ~"])
def test_no_pip_hint_for_what_cannot_be_a_package(cli: Cli, name: str):
    result = cli("resolve", "--accelerator", name)
    assert result.exit_code == 1
    assert "pip install" not in result.stderr
    assert "Accelerator names are lowercase letters, digits, '_' and '-'." in result.stderr


# -- 6. plugins that steer the selection -------------------------------------------------------


def test_a_plugin_setting_accelctl_devices_at_import_is_named_and_ignored(
    cli: Cli, fake_site: FakeSite
):
    fake_site.install("acme-aaa", {"aaa": "fakeplugins.steers_devices:SteeringAccelerator"})
    auto = cli("resolve", "--json")  # imports every plugin, aaa first
    assert auto.exit_code == 0, auto.output
    assert strict_json(auto.stdout)["devices"] == ["cpu"]
    assert "warning: accelerator 'aaa' (acme-aaa 1.0): importing it set ACCELCTL_DEVICES" in (
        auto.stderr
    )

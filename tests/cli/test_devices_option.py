"""``--devices`` on the command line (``resolve``, ``launch``): Python's ``devices=`` grammar.

Errors and help list only the forms a command line can type.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from cliharness import Cli

from fakedists import FakeSite

#: What a command line cannot type, or what reads as a form accelctl does not take: a Python
#: list, or a range of indices such as "0-1".
NOT_A_COMMAND_LINE_FORM = re.compile(r"\[i, j\]|\[0\]|\b\d+-\d+\b")


@pytest.mark.parametrize("spec", ["0-1", "[0,1]", "abc", "5", "0,0"])
@pytest.mark.parametrize("command", ["resolve", "launch"])
def test_a_devices_error_lists_only_what_a_command_line_can_type(
    cli: Cli, fake_site: FakeSite, tmp_path: Path, command: str, spec: str
) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})  # 2 devices
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    args = ["--accelerator", "good", "--devices", spec]
    result = cli(command, *args, *([str(script)] if command == "launch" else []))
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    # Worded for the command line it came from: the flag as typed, not a Python keyword.
    typed = f"--devices {shlex.quote(spec)}"
    assert line.startswith(f"error: good: {typed} "), line
    accepted = line.partition("Accepted: ")[2]
    assert accepted.startswith('"auto" or "-1" (all visible devices)'), line
    assert "2 good devices are visible (indices 0 and 1)" in line
    assert NOT_A_COMMAND_LINE_FORM.search(line.replace(typed, "")) is None, line


@pytest.mark.parametrize("command", ["resolve", "launch"])
def test_the_devices_help_lists_only_what_a_command_line_can_type(cli: Cli, command: str) -> None:
    result = cli(command, "--help")
    help_text = " ".join(result.stdout.split())
    assert '"i,j" or "i," such as "0,1"' in help_text
    assert NOT_A_COMMAND_LINE_FORM.search(help_text) is None


def test_a_spec_from_the_environment_lists_the_string_forms_too(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    result = cli("resolve", "--accelerator", "good", env={"ACCELCTL_DEVICES": "[0,1]"})
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ACCELCTL_DEVICES='[0,1]' sets what --devices auto means")
    assert 'write the indices without brackets: "0,1"' in line
    assert NOT_A_COMMAND_LINE_FORM.search(line.replace("'[0,1]'", "")) is None, line

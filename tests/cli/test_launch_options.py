"""``accelctl launch``'s options: ``--master-addr``, unknown options, and what follows SCRIPT.

--master-addr takes a host name or an IP address, else a usage error; an unknown option before
SCRIPT is click's own usage error; everything after SCRIPT is the script's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cliharness import Cli

from accelctl.cli.launch_cmd import _check_address


@pytest.mark.parametrize(
    "address",
    ["$(touch PWNED)", "`touch PWNED`", "a b", "host;rm", "-node", "node..x", "x" * 300, ""],
)
def test_a_master_addr_that_is_no_address_is_a_usage_error(
    cli: Cli, address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = cli("launch", "--nnodes", "2", "--master-addr", address, str(script))
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--master-addr'" in result.stderr
    assert "is not a host name or an IP address" in result.stderr
    assert "internal error" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no PWNED


@pytest.mark.parametrize(
    "address", ["10.0.0.1", "node-0.cluster", "localhost", "node0.example.org.", "fd00::1", "[::1]"]
)
def test_host_names_and_ip_addresses_are_accepted(address: str) -> None:
    assert _check_address(None, None, f" {address} ") == address  # type: ignore[arg-type]


def test_a_mistyped_option_before_script_is_click_s_usage_error(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n")
    result = cli("launch", "--acelerator", "cpu", str(script))
    assert result.exit_code == 2, result.output
    assert "No such option '--acelerator'. Did you mean '--accelerator'?" in result.stderr
    assert "does not exist" not in result.stderr
    assert not (tmp_path / "ran").exists()


def test_options_after_script_are_still_the_script_s(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("import json, sys\njson.dump(sys.argv[1:], open('argv.json', 'w'))\n")
    result = cli("launch", "--cpu", str(script), "--acelerator", "x", "-h", "--", "y")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "argv.json").read_text()) == [
        "--acelerator",
        "x",
        "-h",
        "--",
        "y",
    ]

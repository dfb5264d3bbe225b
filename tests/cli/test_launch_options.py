"""``accelctl launch``'s --master-addr: a host name or an IP address, else a usage error."""

from __future__ import annotations

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

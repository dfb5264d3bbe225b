"""The command line calls a device by the name a user types, its plugin by its own name.

``list``, ``resolve`` and their JSON name the accelerator by its devices' type
(``fakeplugins.slots``: installed as ``slot``, devices and alias ``twin``, the generic PrivateUse1
plugin's shape), and the plugin's own name in the PLUGIN column and the ``plugin`` key; errors name
flags, not Python keywords.
"""

from __future__ import annotations

import pytest
from cliharness import Cli

from fakedists import FakeSite


@pytest.fixture
def slot_site(fake_site: FakeSite) -> FakeSite:
    fake_site.install("accelctl-slot", {"slot": "fakeplugins.slots:SlotAccelerator"}, version="1.2")
    return fake_site


ONLY_SLOT = {"ACCELCTL_PLUGINS": "slot,cpu"}


def test_list_names_the_accelerator_and_shows_the_plugin(cli: Cli, slot_site: FakeSite) -> None:
    rows = {row["plugin"]: row for row in cli.json("list", "--json", env=ONLY_SLOT)}
    assert (rows["slot"]["name"], rows["cpu"]["name"]) == ("twin", "cpu")
    table = cli("list", env=ONLY_SLOT).stdout.splitlines()
    [line] = [line for line in table if "accelctl-slot" in line]
    assert line.split()[:3] == ["twin", "yes", "2"]  # one name, not "slot (twin)"
    assert "accelctl-slot 1.2 (plugin slot)" in line


@pytest.mark.parametrize("asked", ["twin", "slot"])
def test_resolve_names_the_accelerator_as_the_user_types_it(
    cli: Cli, slot_site: FakeSite, asked: str
) -> None:
    document = cli.json("resolve", "--accelerator", asked, "--devices", "0,1", "--json")
    assert (document["accelerator"], document["plugin"]) == ("twin", "slot")
    text = cli("resolve", "--accelerator", asked).stdout
    assert "accelerator:         twin (accelctl-slot 1.2)" in text


def test_an_unknown_name_lists_and_suggests_the_same_names(cli: Cli, slot_site: FakeSite) -> None:
    result = cli("resolve", "--accelerator", "twim", env=ONLY_SLOT)
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    installed = line.partition("(installed: ")[2].partition(")")[0].split(", ")
    assert "twin" in installed and "slot" not in installed
    assert line.endswith("Did you mean 'twin'?")


def test_cli_errors_name_flags(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-absent", {"absent": "fakeplugins.undetected:UndetectedAccelerator"})
    result = cli("resolve", "--accelerator", "absent")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert "Use --accelerator auto to take what is available" in line
    assert 'accelerator="' not in line
    result = cli("resolve", "--accelerator", "cpu", "--devices", "0")
    [line] = result.stderr.splitlines()
    assert line.startswith("error: cpu: --devices 0 ")

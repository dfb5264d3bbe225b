"""What the CLI reports when it cannot do what was asked: JSON errors, disabled plugins."""

from __future__ import annotations

import json

from cliharness import Cli

from fakedists import FakeSite


def test_resolve_json_error_is_a_json_object_on_stdout(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    result = cli("resolve", "--accelerator", "goood", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["error_type"] == "UnknownAcceleratorError"
    assert document["error"].startswith("no accelerator named 'goood' is installed")
    assert "Did you mean 'good'?" in document["error"]
    # The one line on stderr is still there, for people.
    assert result.stderr == f"error: {document['error']}\n"


def test_resolve_json_error_for_a_bad_devices_spec(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    result = cli("resolve", "-a", "good", "-d", "7", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["error_type"] == "DeviceSpecError"
    assert "good: --devices 7 asks for 7 devices, more than are visible" in document["error"]


def test_resolve_without_json_prints_nothing_on_stdout_on_error(cli: Cli) -> None:
    result = cli("resolve", "--accelerator", "nope")
    assert result.exit_code == 1 and result.stdout == ""


def test_validate_reports_a_disabled_plugin_as_disabled(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    env = {"ACCELCTL_PLUGINS": "cpu,good", "ACCELCTL_DISABLE": "cpu"}
    result = cli("validate", env=env)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert (
        "cpu (accelctl-cpu 0.1.0): disabled by ACCELCTL_DISABLE; not imported, not validated"
        in (lines)
    )
    assert "passed" not in " ".join(line for line in lines if line.startswith("cpu"))
    # Whatever else is installed is disabled by the allowlist; only good is validated.
    verdict, _, disabled = lines[-1].partition("; disabled, not validated: ")
    assert verdict == "1 accelerator(s) validated, all passed"
    assert "cpu" in disabled.split(", ")
    report = {r["name"]: r for r in json.loads(cli("validate", "--json", env=env).stdout)}
    assert report["cpu"]["passed"] is None
    assert report["cpu"]["disabled"] == "disabled by ACCELCTL_DISABLE"
    assert report["good"]["passed"] is True and report["good"]["disabled"] is None


def test_validate_when_every_plugin_is_disabled(cli: Cli) -> None:
    result = cli("validate", env={"ACCELCTL_PLUGINS": "cpu", "ACCELCTL_DISABLE": "cpu"})
    assert result.exit_code == 0
    last = result.stdout.splitlines()[-1]
    assert last.startswith("disabled, not validated: ") and "cpu" in last
    assert "validated, all passed" not in result.stdout

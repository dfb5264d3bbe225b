"""Defects found by fuzzing the CLI as an attacker would, each run as a user runs it.

The real ``accelctl`` in a fresh interpreter, with the hostile package on its ``PYTHONPATH``.

``HANG_GUARD_S`` is a hang guard only: each command takes about a second.
"""

from __future__ import annotations

import json

import pytest
from cliharness import Cli

from fakedists import FakeSite

#: A hang guard: the command ends in about a second, or never (the defect).
HANG_GUARD_S = 120


@pytest.mark.slow
def test_a_named_lookup_survives_an_unrelated_malformed_distribution(
    cli: Cli, fake_site: FakeSite
) -> None:
    # torch's own backend autoload fails on it (TypeError from importlib.metadata) at the first
    # `import torch`, which this fresh interpreter has not done yet.
    fake_site.install_raw("junk", {"entry_points.txt": "[console_scripts]\nnot a pair\n"})
    done = cli.process(
        "resolve", "--accelerator", "cpu", "--json", path=fake_site.path, autoload=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["devices"] == ["cpu"]
    assert "skipping a broken distribution: cannot read the entry points of distribution junk" in (
        done.stderr
    )
    assert "internal error" not in done.stderr


def test_a_plugin_that_starts_a_non_daemon_thread_at_import_does_not_hold_list_up(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install(
        "acme-threaded", {"threaded": "fakeplugins.spawns_thread:ThreadingAccelerator"}
    )
    # The hang guard fails the test if the command never ends.
    done = cli.process("list", "--json", path=fake_site.path, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["threaded"]["available"] is True


def test_a_second_distribution_claiming_cpu_is_never_answered_with_pip_install_accelctl_cpu(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install("other-cpu", {"cpu": "accelctl_cpu"}, {})
    done = cli.process("resolve", path=fake_site.path)
    assert done.returncode == 1
    assert "'cpu' is claimed by 2 distributions: accelctl-cpu and other-cpu" in done.stderr
    assert "pip install accelctl-cpu" not in done.stderr
    assert "accelctl-cpu is installed but offers no 'cpu' on this machine" in done.stderr


def test_a_plugin_calling_os_exit_in_detect_is_its_row_not_the_end_of_list(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install("acme-quitter", {"quitter": "fakeplugins.hostile:DetectCallsOsExit"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    done = cli.process("list", "--json", path=fake_site.path)
    assert done.returncode == 0, (done.returncode, done.stderr)
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["good"]["available"] is True
    assert rows["quitter"]["state"] == "broken"
    assert rows["quitter"]["error"] == (
        "accelerator 'quitter' (acme-quitter 1.0): the process accelctl asked it in ended with "
        "exit status 7 (os._exit, or an exit from native code); accelctl asked the others again "
        "without it"
    )

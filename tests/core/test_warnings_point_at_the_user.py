"""A warning a user can trigger names the user's line, however deep in accelctl it is raised.

``resolve("auto")`` or a ``Trainer()`` skipping a broken plugin, a plugin whose import changes
``ACCELCTL_*``, found through ``get_accelerator``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import accelctl

from fakedists import FakeSite


@pytest.fixture
def broken_site(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site.install("acme-broken", {"broken": "fakeplugins.refuses_import"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,broken")


def _warned(call: Callable[[], Any]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, accelctl.PluginWarning)]


@pytest.mark.parametrize(
    "call",
    [lambda: accelctl.resolve(), lambda: accelctl.Trainer(root_dir="unused")],
    ids=["resolve", "Trainer"],
)
def test_skipping_a_broken_plugin_under_auto_names_the_callers_line(
    broken_site: None, call: Callable[[], Any]
) -> None:
    [warning] = _warned(call)
    assert "libhabana.so not found" in str(warning.message)
    assert warning.filename == __file__


def test_a_plugin_that_changes_a_variable_on_import_is_named_at_the_callers_line(
    fake_site: FakeSite,
) -> None:
    fake_site.install("acme-meddler", {"meddler": "fakeplugins.steers_devices:SteeringAccelerator"})
    [warning] = _warned(lambda: accelctl.get_accelerator("meddler"))
    assert "ACCELCTL_DEVICES" in str(warning.message)
    assert warning.filename == __file__

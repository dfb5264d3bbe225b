"""The core's shape, as issue 17 set it: a narrow public surface and modules that each hold one
idea (a module past 400 lines holds two; split it where they part, not by line count)."""

from __future__ import annotations

from pathlib import Path

import accelctl

CORE = Path(accelctl.__file__).resolve().parent
MODULE_LIMIT = 400


def test_no_module_of_the_core_is_over_the_limit() -> None:
    sizes = {
        str(path.relative_to(CORE)): len(path.read_text().splitlines())
        for path in CORE.rglob("*.py")
    }
    assert len(sizes) > 20  # the core itself was found
    assert {name: n for name, n in sizes.items() if n > MODULE_LIMIT} == {}


def test_the_public_surface_is_what_users_and_plugin_authors_use() -> None:
    assert len(accelctl.__all__) <= 30
    assert len(set(accelctl.__all__)) == len(accelctl.__all__)
    for name in accelctl.__all__:
        assert getattr(accelctl, name) is not None
    # The registry's internals are accelctl.testing's, for tests.
    for internal in ("Registry", "installed_plugins", "reset_registry", "PluginRecord"):
        assert internal not in accelctl.__all__
    assert {"Registry", "installed_plugins", "reset_registry"} <= set(dir(accelctl.testing))
    # A hook that failed at run time is not a plugin that failed to load.
    assert not issubclass(accelctl.PluginHookError, accelctl.PluginLoadError)

"""The check each framework session makes of the release it installed (noxfile.py).

The ``*-newest`` sessions install the extras unpinned, so the day a framework ships a release
outside its bridge's window, this fails there, not in a user's run.
"""

from __future__ import annotations

from importlib import import_module, metadata

from accelctl.integrations._shared.versions import Window


def assert_adapted_in_window(window: Window, bridge: str) -> None:
    """The installed release is in ``window``, and importing ``bridge`` adapted it silently."""
    version = metadata.version(window.framework)
    assert window.covers(version), (
        f"{window.framework} {version} is installed, outside the window accelctl's bridge is "
        f"tested with ({window.text()}): run this session's tests on it, then widen the window "
        "in accelctl/integrations/_shared/versions.py (or, where the bridge breaks, add an upper "
        "bound to the extra with the reason)"
    )
    # In the window, with every internal there: adapted, with no warning (Adaptation.check).
    adaptation = import_module(f"accelctl.integrations.{bridge}").ADAPTATION
    assert adaptation.window is window
    assert adaptation.refusal == "", adaptation.refusal

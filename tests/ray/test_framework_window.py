"""The installed Ray is in the bridge's window and adapted (tests/frameworkwindow.py)."""

from frameworkwindow import assert_adapted_in_window

from accelctl.integrations._shared.versions import RAY


def test_the_installed_ray_is_in_the_bridges_window() -> None:
    assert_adapted_in_window(RAY, "ray")

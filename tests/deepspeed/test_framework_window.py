"""The installed DeepSpeed is in its bridge's window and adapted (tests/frameworkwindow.py)."""

from frameworkwindow import assert_adapted_in_window

from accelctl.integrations._shared.versions import DEEPSPEED


def test_the_installed_deepspeed_is_in_its_bridges_window() -> None:
    assert_adapted_in_window(DEEPSPEED, "deepspeed")

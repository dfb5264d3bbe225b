"""The installed Accelerate and transformers are in their bridges' windows and adapted.

The check is tests/frameworkwindow.py's.
"""

import pytest
from frameworkwindow import assert_adapted_in_window

from accelctl.integrations._shared.versions import ACCELERATE, TRANSFORMERS


@pytest.mark.parametrize(
    ("window", "bridge"), [(ACCELERATE, "accelerate"), (TRANSFORMERS, "transformers")]
)
def test_the_installed_framework_is_in_its_bridges_window(window: object, bridge: str) -> None:
    assert_adapted_in_window(window, bridge)  # type: ignore[arg-type]

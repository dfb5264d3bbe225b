"""The check every bridge's patches pass: recorded, idempotent, and undone cleanly.

``enable()`` records one patch per internal the bridge replaces (accelctl/integrations/_shared/
patching.py), is idempotent, and undoing the patches puts the framework's own code back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from accelctl.integrations._shared.patching import MARK, Patch, Patches


def assert_enabled_and_undone(
    enable: Callable[[], tuple[Patch, ...]], patches: Patches, expected: Collection[str]
) -> None:
    """Assert ``enable()`` replaced exactly ``expected``, idempotently, and ``undo()`` restores all.

    Each patch of ``expected`` (paths) is recorded with its original and why; enabling again changes
    nothing; ``patches.undo()`` puts every original back (enabled again at the end, for the tests
    that follow in this process).
    """
    applied = enable()
    assert sorted(p.path for p in applied) == sorted(expected)
    for patch in applied:
        assert vars(patch.owner)[patch.name] is patch.replacement, patch.path
        assert getattr(patch.replacement, MARK, False) and patch.why, patch.path
        assert patch.original is not patch.replacement, patch.path
    assert enable() == applied  # the same records: nothing wrapped twice
    undone = patches.undo()
    try:
        assert sorted(p.path for p in undone) == sorted(expected)
        for patch in undone:
            now: Any = vars(patch.owner).get(patch.name)
            assert now is (patch.original if patch.own else None), patch.path
            assert not getattr(getattr(patch.owner, patch.name), MARK, False), patch.path
        assert patches.applied() == ()
    finally:
        again = enable()
    assert sorted(p.path for p in again) == sorted(expected)

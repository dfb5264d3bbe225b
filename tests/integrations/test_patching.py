"""The one way a bridge replaces an internal: declared, shape-checked, recorded, once, undoable.

The helpers are accelctl/integrations/_shared/patching.py's.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelctl import FrameworkVersionError
from accelctl.integrations._shared.patching import MARK, Patches
from accelctl.integrations._shared.versions import Adaptation, Internal, Window

FRAMEWORK = textwrap.dedent(
    '''
    class Base:
        def inherited(self, x):
            """The base's."""
            return ("base", x)


    class State(Base):
        def choose(self, device):
            """Choose a device."""
            return ("framework", device)


    def helper(a, b):
        return a + b
    '''
)


@pytest.fixture
def framework(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A framework of its own, importable as ``patchframe`` for this test only."""
    (tmp_path / "patchframe.py").write_text(FRAMEWORK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "patchframe", raising=False)
    import patchframe

    yield patchframe
    sys.modules.pop("patchframe", None)


def _patches(*internals: Internal) -> Patches:
    return Patches(Adaptation("frame", Window("patchframe", (1, 0), (1, 1)), internals))


def _tagging(tag: str) -> Callable[[Any], Any]:
    def build(original: Any) -> Any:
        def replacement(self: Any, *args: Any) -> Any:
            return (tag, original(self, *args))

        return replacement

    return build


def test_a_patch_is_recorded_applied_once_and_undone(framework: Any) -> None:
    original = framework.State.choose
    patches = _patches(
        Internal("patchframe:State", "choose", ("self", "device")),
        Internal("patchframe:State", "inherited", ("self", "x")),
        Internal("patchframe", "helper", ("a", "b")),
    )
    patch = patches.apply("patchframe:State", "choose", _tagging("bridge"), "the plugin's device")
    state = framework.State()
    assert state.choose("npu") == ("bridge", ("framework", "npu"))
    assert (patch.owner, patch.name, patch.original, patch.why, patch.own) == (
        framework.State, "choose", original, "the plugin's device", True,
    )  # fmt: skip
    assert patch.replacement is framework.State.choose and getattr(patch.replacement, MARK)
    assert patch.path == "patchframe.State.choose"
    doc = patch.replacement.__doc__
    assert doc.startswith("accelctl's adaptation of State.choose") and doc.endswith(
        "Choose a device."
    )
    # Asked again: the same record, nothing wrapped twice.
    again = patches.apply("patchframe:State", "choose", _tagging("twice"), "again")
    assert again is patch and state.choose("npu") == ("bridge", ("framework", "npu"))

    # An inherited method is replaced on the class named, and undone by deleting it there.
    inherited = patches.apply("patchframe:State", "inherited", _tagging("bridge"), "why")
    assert not inherited.own and inherited.original is framework.Base.inherited
    # A module's function.
    patches.apply("patchframe", "helper", lambda add: lambda a, b: add(a, b) * 10, "why")
    assert framework.helper(1, 2) == 30
    assert patches.applied() == (patch, inherited, patches.applied()[2])

    undone = patches.undo()
    assert [p.name for p in undone] == ["helper", "inherited", "choose"]  # the last first
    assert framework.State.choose is original and not hasattr(framework.State.choose, MARK)
    assert "inherited" not in vars(framework.State)
    assert state.inherited(1) == ("base", 1) and framework.helper(1, 2) == 3
    assert patches.applied() == ()
    # Applied again after an undo: a new record over the original.
    assert patches.apply("patchframe:State", "choose", _tagging("b"), "why").original is original


def test_undo_by_name_leaves_the_other_patches(framework: Any) -> None:
    patches = _patches(
        Internal("patchframe:State", "choose", ("self",)), Internal("patchframe", "helper")
    )
    patches.apply("patchframe:State", "choose", _tagging("bridge"), "why")
    patches.apply("patchframe", "helper", lambda add: lambda a, b: 0, "why")
    assert [p.name for p in patches.undo("helper")] == ["helper"]
    assert framework.helper(1, 2) == 3 and hasattr(framework.State.choose, MARK)


def test_an_undeclared_internal_is_refused_naming_it(framework: Any) -> None:
    patches = _patches(Internal("patchframe:State", "choose", ("self",)))
    with pytest.raises(LookupError) as info:
        patches.apply("patchframe:State", "inherited", _tagging("x"), "why")
    assert str(info.value) == (
        "the accelctl frame bridge patches patchframe:State.inherited, which its ADAPTATION "
        "does not declare; declare it there as an Internal, so that the bridge's import checks "
        "its shape"
    )
    assert "inherited" not in vars(framework.State)


def test_a_changed_shape_is_refused_before_anything_is_replaced(framework: Any) -> None:
    original = framework.State.choose
    patches = _patches(Internal("patchframe:State", "choose", ("self", "device", "backend")))
    with pytest.raises(FrameworkVersionError) as info:
        patches.apply("patchframe:State", "choose", _tagging("x"), "why")
    assert str(info.value) == (
        "accelctl.integrations.frame cannot adapt patchframe.State.choose: it has changed: it "
        "takes (self, device), the bridge passes (self, device, backend). The bridge is tested "
        "with patchframe 1.0 to 1.1"
    )
    assert framework.State.choose is original and patches.applied() == ()


def test_a_family_member_is_checked_through_its_declaration(framework: Any) -> None:
    patches = _patches(Internal("patchframe", "helper", ("a", "b")))
    framework.SomeBuilder = object
    patch = patches.apply("patchframe", "SomeBuilder", lambda _: int, "why", declared_as="helper")
    assert framework.SomeBuilder is int and patch.internal.name == "helper"
    assert not hasattr(int, MARK)  # a class put in place is not marked: it may be anyone's
    with pytest.raises(FrameworkVersionError, match="OtherBuilder: it is not there"):
        patches.apply("patchframe", "OtherBuilder", lambda _: int, "why", declared_as="helper")


def test_undo_refuses_to_drop_what_replaced_a_patch_since(framework: Any) -> None:
    patches = _patches(Internal("patchframe:State", "choose", ("self",)))
    patches.apply("patchframe:State", "choose", _tagging("bridge"), "why")
    framework.State.choose = lambda self, device: "theirs"
    with pytest.raises(RuntimeError, match=r"patchframe\.State\.choose is no longer"):
        patches.undo()
    assert framework.State().choose("x") == "theirs"

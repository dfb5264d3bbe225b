"""The one rule of every bridge (accelctl/integrations/_versions.py): a window of releases, and
the internals it adapts checked by their shape, never refused by the version number alone."""

from __future__ import annotations

import functools
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from accelctl.integrations._versions import (
    ACCELERATE,
    DEEPSPEED,
    LIGHTNING,
    RAY,
    TRANSFORMERS,
    WINDOWS,
    Adaptation,
    Internal,
    Window,
)

ROOT = Path(__file__).resolve().parents[2]
WINDOW = Window("frame", (2, 3), (2, 6))


@pytest.mark.parametrize(
    ("version", "covered"),
    [("2.3.0", True), ("2.6.6", True), ("2.6.0rc1", True), ("2.5.1.post0", True),
     ("2.2.9", False), ("2.7.0", False), ("3.0.0", False), ("x", False)],
)  # fmt: skip
def test_a_window_covers_every_minor_from_oldest_to_newest(version: str, covered: bool) -> None:
    assert WINDOW.covers(version) is covered


def test_a_window_says_itself_as_text_and_as_requirements() -> None:
    assert WINDOW.text() == "frame 2.3 to 2.6"
    assert WINDOW.requirement() == "frame>=2.3"  # no upper bound: never downgrades a user
    assert WINDOW.pinned() == "frame>=2.3,<2.7"


def test_each_extra_names_its_windows_oldest_minor_and_no_upper_bound() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["lightning"] == [LIGHTNING.requirement()]
    assert extras["accelerate"] == [ACCELERATE.requirement()]
    assert extras["transformers"] == [TRANSFORMERS.requirement(), ACCELERATE.requirement()]
    assert extras["ray"] == ["ray[train]" + RAY.requirement().removeprefix("ray")]
    assert extras["deepspeed"] == [DEEPSPEED.requirement()]
    # At least four minors each (the floor: the last four minors and the newest).
    assert all(w.newest[0] > w.oldest[0] or w.newest[1] - w.oldest[1] >= 3 for w in WINDOWS)


@pytest.fixture
def framework(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A module ``fakeframework`` with a class whose internals the tests change."""
    module = types.ModuleType("fakeframework")

    class Engine:
        def choose(self, devices: int, backend: str = "") -> None: ...

        @functools.cached_property
        def devices(self) -> int:
            return 1

        @property
        def state(self) -> int:
            return 0

    module.Engine = Engine  # type: ignore[attr-defined]
    module.ALIASES = ("a",)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fakeframework", module)
    yield module


def _adaptation() -> Adaptation:
    return Adaptation(
        "fake",
        WINDOW,
        (
            Internal("fakeframework:Engine", "choose", ("self", "devices", "backend")),
            Internal("fakeframework:Engine", "devices", ("self",)),
            Internal("fakeframework:Engine", "state", ("self",)),
            Internal("fakeframework", "ALIASES"),
        ),
    )


def test_internals_there_in_the_window_are_adapted_silently(framework: object) -> None:
    adaptation = _adaptation()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert adaptation.check("2.4.1") is True
    assert adaptation.refusal == ""


def test_a_release_outside_the_window_with_its_internals_there_is_adapted_with_one_warning(
    framework: object,
) -> None:
    adaptation = _adaptation()
    with pytest.warns(UserWarning) as caught:
        assert adaptation.check("2.7.0") is True
    (warning,) = caught
    message = str(warning.message)
    assert "tested with frame 2.3 to 2.6, not 2.7.0" in message
    assert "the 4 internals it adapts are there as it expects, so it adapts them" in message
    assert "pip install 'frame>=2.3,<2.7'" in message
    assert adaptation.refusal == ""


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda m: setattr(m.Engine, "choose", lambda self, devices: None),
            "fakeframework.Engine.choose no longer takes (self, devices, backend): "
            "it takes (self, devices)",
        ),
        (lambda m: delattr(m.Engine, "state"), "fakeframework.Engine.state no longer exists"),
        (lambda m: delattr(m, "ALIASES"), "fakeframework.ALIASES no longer exists"),
        (
            lambda m: delattr(m, "Engine"),
            "fakeframework.Engine.choose no longer exists (fakeframework has no Engine)",
        ),
    ],
    ids=["signature", "property", "module-name", "class"],
)
def test_a_changed_internal_is_named_and_nothing_is_adapted(
    framework: types.ModuleType, change: object, said: str
) -> None:
    change(framework)  # type: ignore[operator]
    adaptation = _adaptation()
    with pytest.warns(UserWarning) as caught:
        assert adaptation.check("2.6.0") is False  # in the window: the shape decides
    (warning,) = caught
    assert adaptation.refusal is not None
    assert adaptation.refusal.startswith(
        f"accelctl.integrations.fake cannot adapt frame 2.6.0: {said}."
    )
    assert "tested with frame 2.3 to 2.6: pip install 'frame>=2.3,<2.7'" in adaptation.refusal
    assert str(warning.message).startswith(adaptation.refusal)


def test_an_internal_of_a_module_that_cannot_be_imported_is_named() -> None:
    problem = Internal("no_such_framework.state:Thing", "run").problem()
    assert problem is not None and problem.startswith("cannot be imported (no_such_framework")

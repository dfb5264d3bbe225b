"""Every bridge has a window of releases and checks the internals it adapts by their shape.

Never refused by the version number alone (accelctl/integrations/_shared/versions.py).
"""

from __future__ import annotations

import functools
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from accelctl import FrameworkVersionError
from accelctl.integrations._shared.versions import (
    ACCELERATE,
    DEEPSPEED,
    LIGHTNING,
    RAY,
    TRANSFORMERS,
    WINDOWS,
    Adaptation,
    Internal,
    Window,
    use_problem,
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
    assert "the 4 names it uses of frame are there as it expects, so it adapts them" in message
    assert "pip install 'frame>=2.3,<2.7'" in message
    assert adaptation.refusal == ""


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda m: setattr(m.Engine, "choose", lambda self, devices: None),
            "fakeframework.Engine.choose has changed: it takes (self, devices), the bridge "
            "passes (self, devices, backend)",
        ),
        (lambda m: delattr(m.Engine, "state"), "fakeframework.Engine.state is not there"),
        (lambda m: delattr(m, "ALIASES"), "fakeframework.ALIASES is not there"),
        (
            lambda m: delattr(m, "Engine"),
            "fakeframework.Engine.choose is not there (fakeframework has no Engine)",
        ),
    ],
    ids=["signature", "property", "module-name", "class"],
)
def test_a_changed_internal_is_refused_naming_it_and_the_window(
    framework: types.ModuleType, change: object, said: str
) -> None:
    change(framework)  # type: ignore[operator]
    adaptation = _adaptation()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, not warned about
        with pytest.raises(FrameworkVersionError) as refused:
            adaptation.check("2.6.0")  # in the window: the shape decides
    message = str(refused.value)
    assert message.startswith(f"accelctl.integrations.fake cannot run on frame 2.6.0: {said}")
    assert "tested with frame 2.3 to 2.6: pip install 'frame>=2.3,<2.7'" in message
    assert "'accelctl[fake]'" in message
    assert "no longer" not in message
    assert adaptation.refusal == message
    assert isinstance(refused.value, ImportError)  # raised where the bridge is imported


def test_an_internal_of_a_module_that_cannot_be_imported_is_named() -> None:
    problem = Internal("no_such_framework.state:Thing", "run").problem()
    assert problem == "is not there (no module no_such_framework)"


# -- every name a bridge uses (accelctl/integrations/_shared/uses.py) ------------------------


#: A framework as a real module with a source file: instance attributes are read from it.
SOURCED = """
import functools

ALIASES = ("a",)


class Engine:
    def __init__(self):
        self.size = 1

    def choose(self, devices: int, backend: str = "") -> None: ...

    @functools.cached_property
    def devices(self) -> int:
        return 1
"""


@pytest.mark.parametrize(
    ("use", "said"),
    [
        ("sourcedframework:Engine", None),
        ("sourcedframework:Engine.choose(self, _, backend)", None),
        ("sourcedframework:Engine.choose(self, _, _)", None),
        ("sourcedframework:Engine.devices", None),
        ("sourcedframework:Engine.devices.real", None),  # a value's attribute: not known here
        ("sourcedframework:Engine.size", None),  # set on each instance by the class's code
        ("sourcedframework:ALIASES", None),
        ("sourcedframework:Engine()", None),
        ("sourcedframework:Engine.gone", "sourcedframework.Engine.gone is not there"),
        ("sourcedframework:Gone.choose", "sourcedframework.Gone.choose is not there"),
        ("no_such_framework:Thing", "no_such_framework.Thing is not there (no module "),
        (
            "sourcedframework:Engine.choose(self, _, _, _)",
            "sourcedframework.Engine.choose has changed: it takes (self, devices: int, "
            "backend: str = '') -> None, and the bridge passes (self, _, _, _)",
        ),
        (
            "sourcedframework:Engine.choose(self, _, device)",
            "sourcedframework.Engine.choose has changed",
        ),
        ("sourcedframework:Engine(_)", "sourcedframework.Engine has changed: it takes ()"),
    ],
)
def test_each_name_a_bridge_uses_is_checked_as_the_bridge_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use: str, said: str | None
) -> None:
    (tmp_path / "sourcedframework.py").write_text(SOURCED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sourcedframework", raising=False)
    problem = use_problem(use)
    if said is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(said), problem


def _release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, source: str) -> None:
    """Install a real distribution ``frame`` of ``version`` on the path.

    Its metadata (a dist-info folder) and its module, whose code is ``source``.
    """
    info = tmp_path / f"frame-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: frame\nVersion: {version}\n")
    (tmp_path / "frame.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "frame", raising=False)


#: A release of ``frame`` whose ``Engine.run`` is there as the bridge below uses it.
FRAME = "class Engine:\n    def run(self, devices):\n        pass\n"


def _frame_adaptation() -> Adaptation:
    return Adaptation("fake", WINDOW, (Internal("frame:Engine", "run", ("self", "devices")),))


def test_a_release_older_than_the_window_with_all_there_is_adapted_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Never refused by its number alone: the shape checks decide, as above the window.
    _release(tmp_path, monkeypatch, "2.2.5", FRAME)
    adaptation = _frame_adaptation()
    with pytest.warns(UserWarning) as caught:
        adaptation.require()
    (warning,) = caught
    message = str(warning.message)
    assert "tested with frame 2.3 to 2.6, not 2.2.5" in message
    assert "the 1 names it uses of frame are there as it expects, so it adapts them" in message
    assert adaptation.refusal == ""


def test_a_release_older_than_the_window_lacking_a_name_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _release(tmp_path, monkeypatch, "2.2.5", "class Engine:\n    pass\n")
    adaptation = _frame_adaptation()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, not warned about
        with pytest.raises(FrameworkVersionError) as refused:
            adaptation.require()
    assert str(refused.value) == (
        "accelctl.integrations.fake cannot run on frame 2.2.5: frame.Engine.run is not there. "
        "The bridge is tested with frame 2.3 to 2.6: pip install 'frame>=2.3,<2.7' installs a "
        "tested release (pip install 'accelctl[fake]' the newest)"
    )


def test_a_release_that_fails_to_import_is_refused_with_what_its_import_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As an old release beside a torch or numpy it predates: its own import raises.
    _release(tmp_path, monkeypatch, "1.8.0", 'raise ValueError("needs numpy<2\\n(and more)")\n')
    adaptation = _frame_adaptation()
    with pytest.raises(FrameworkVersionError) as refused:
        adaptation.require()
    message = str(refused.value)
    assert message == (
        "accelctl.integrations.fake cannot run on frame 1.8.0: importing it raised ValueError: "
        "needs numpy<2. The bridge is tested with frame 2.3 to 2.6: pip install "
        "'frame>=2.3,<2.7' installs a tested release (pip install 'accelctl[fake]' the newest)"
    )
    assert "\n" not in message  # one line
    assert isinstance(refused.value.__cause__, ValueError)
    # The bridge's import tried again in the same process: refused again, never let through.
    with pytest.raises(FrameworkVersionError, match="importing it raised ValueError"):
        adaptation.require()


def test_an_internal_whose_module_raises_on_import_is_refused_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray 2.3.0 on Python 3.11: ray imports, ray.train raises ValueError (a dataclass default).
    package = tmp_path / "brokenframework"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text('raise ValueError("mutable default")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("brokenframework", "brokenframework.train"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    said = "cannot be imported (brokenframework.train raised ValueError: mutable default)"
    assert Internal("brokenframework.train:Backend", "start").problem() == said
    assert use_problem("brokenframework.train:Backend") == f"brokenframework.train.Backend {said}"


def test_a_refused_release_is_refused_again_when_the_bridge_is_imported_again(
    framework: types.ModuleType,
) -> None:
    delattr(framework.Engine, "state")  # type: ignore[attr-defined]
    adaptation = _adaptation()
    framework.__version__ = "2.6.0"  # type: ignore[attr-defined]
    adaptation.window = Window("fakeframework", WINDOW.oldest, WINDOW.newest)
    for _ in range(2):
        with pytest.raises(FrameworkVersionError, match=r"Engine\.state is not there"):
            adaptation.require()


def test_a_framework_that_is_not_installed_is_left_to_the_bridges_import() -> None:
    adaptation = Adaptation("fake", Window("no-such-framework", (1, 0), (1, 1)), ())
    adaptation.require()  # the bridge's own import then says which extra installs it
    assert adaptation.refusal is None

"""Which framework releases a bridge supports, and whether the internals it adapts are there.

One rule for every bridge (Lightning's connectors, Accelerate's state, transformers' device
choice, Ray Train's torch backend):

- each bridge is **tested** with a :class:`Window` of releases, every minor from ``oldest`` to
  ``newest`` (the extra of ``pyproject.toml`` names ``oldest`` as its lower bound, with no upper
  bound, and the test command runs each bridge's tests on both ends);
- what the bridge relies on is the **shape** of the internals it replaces or calls
  (:class:`Internal`: there, and taking the parameters it passes), never the version number.
  :meth:`Adaptation.check` looks at them once, when the bridge is imported:

  - all there, in the window: the bridge adapts them, silently;
  - all there, outside the window: it adapts them, with one warning naming the untested release;
  - one missing or changed: nothing is adapted, a warning names the internal, and the bridge's
    own checks of the effect (the device the framework chose, its process group) refuse a run
    that would go elsewhere than the plugin says, with that internal named
    (:attr:`Adaptation.refusal`), never a silent run on the CPU.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """The releases of ``framework`` (a distribution name) a bridge is tested with: every minor
    from ``oldest`` to ``newest``, both included (pre-releases and patches of those minors too)."""

    framework: str
    oldest: tuple[int, int]
    newest: tuple[int, int]

    def covers(self, version: str) -> bool:
        """True when ``version`` (``"2.6.1"``, ``"2.6.0rc1"``) is one of the window's minors."""
        minor = _minor(version)
        return minor is not None and self.oldest <= minor <= self.newest

    def text(self) -> str:
        """``"lightning 2.3 to 2.6"``."""
        return f"{self.framework} {_dotted(self.oldest)} to {_dotted(self.newest)}"

    def requirement(self) -> str:
        """The extra's requirement: the oldest minor, no upper bound (``"lightning>=2.3"``)."""
        return f"{self.framework}>={_dotted(self.oldest)}"

    def pinned(self) -> str:
        """A requirement that installs a tested release: ``"lightning>=2.3,<2.7"``."""
        return f"{self.requirement()},<{self.newest[0]}.{self.newest[1] + 1}"


#: Each bridge's window. The extras of pyproject.toml name the same oldest minors
#: (tests/integrations/test_versions.py keeps them equal).
LIGHTNING = Window("lightning", (2, 3), (2, 6))
ACCELERATE = Window("accelerate", (1, 13), (1, 16))
TRANSFORMERS = Window("transformers", (5, 21), (5, 25))
RAY = Window("ray", (2, 57), (2, 60))
DEEPSPEED = Window("deepspeed", (0, 16), (0, 19))
WINDOWS = (LIGHTNING, ACCELERATE, TRANSFORMERS, RAY, DEEPSPEED)


@dataclass(frozen=True)
class Internal:
    """One of a framework's internals that a bridge replaces or calls: the attribute ``name`` of
    ``owner`` (``"module"`` or ``"module:Class"``) and, for a function, the names of the
    parameters the bridge passes, in order (``self`` included for a method)."""

    owner: str
    name: str
    parameters: tuple[str, ...] | None = None

    @property
    def path(self) -> str:
        """``"accelerate.state.PartialState._prepare_backend"``."""
        return f"{self.owner.replace(':', '.')}.{self.name}"

    def problem(self) -> str | None:
        """None when the internal is there with the parameters expected; else what changed."""
        module_name, _, class_name = self.owner.partition(":")
        try:
            owner: object = importlib.import_module(module_name)
        except ImportError as exc:
            return f"cannot be imported ({module_name}: {exc})"
        if class_name:
            owner = getattr(owner, class_name, None)
            if owner is None:
                return f"no longer exists ({module_name} has no {class_name})"
        # The class's own attribute (a property or cached_property as itself, not its value).
        found = inspect.getattr_static(owner, self.name, None)
        if found is None:
            return "no longer exists"
        if self.parameters is None:
            return None
        function = getattr(found, "func", None) or getattr(found, "fget", None) or found
        if isinstance(function, (staticmethod, classmethod)):
            function = function.__func__
        try:
            taken = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            return "is no longer a Python function"
        if taken[: len(self.parameters)] != self.parameters:
            return f"no longer takes ({', '.join(self.parameters)}): it takes ({', '.join(taken)})"
        return None


@dataclass
class Adaptation:
    """What one bridge adapts in its framework: the window it is tested with and the internals
    it replaces or calls. :meth:`check` once; then :attr:`refusal` says why nothing was adapted."""

    bridge: str
    window: Window
    internals: tuple[Internal, ...]
    #: None until :meth:`check`; then the reason nothing was adapted, or "" when adapted.
    refusal: str | None = None

    def check(self, version: str, *, stacklevel: int = 3) -> bool:
        """Whether the bridge may adapt ``version`` (its internals are all there); warns once for
        a release outside the window, and once for an internal that changed."""
        problems = [(i, p) for i in self.internals if (p := i.problem()) is not None]
        if problems:
            internal, problem = problems[0]
            self.refusal = (
                f"accelctl.integrations.{self.bridge} cannot adapt {self.window.framework} "
                f"{version}: {internal.path} {problem}. The bridge is tested with "
                f"{self.window.text()}: pip install '{self.window.pinned()}'"
            )
            warnings.warn(
                f"{self.refusal}; until then {self.window.framework}'s own choices apply, and a "
                "run they would place elsewhere than the accelctl plugin says is refused",
                UserWarning,
                stacklevel=stacklevel,
            )
            return False
        self.refusal = ""
        if not self.window.covers(version):
            warnings.warn(
                f"accelctl.integrations.{self.bridge} is tested with {self.window.text()}, not "
                f"{version}; the {len(self.internals)} internals it adapts are there as it "
                f"expects, so it adapts them. If a run misbehaves, install a tested release "
                f"(pip install '{self.window.pinned()}') and tell accelctl",
                UserWarning,
                stacklevel=stacklevel,
            )
        return True


def _minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _dotted(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"

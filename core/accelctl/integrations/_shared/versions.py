"""Which framework releases a bridge supports, and whether what it uses of them is there.

One rule for every bridge (Lightning's connectors, Accelerate's state, transformers' device
choice, Ray Train's torch backend):

- each bridge is **tested** with a :class:`Window` of releases, every minor from ``oldest`` to
  ``newest`` (the extra of ``pyproject.toml`` names ``oldest`` as its lower bound, with no upper
  bound, and the test command runs each bridge's tests on both ends);
- what the bridge relies on is the **shape** of its framework: every module, name, attribute and
  signature its code uses (:data:`.uses.USES`, derived from the
  code and kept so by a test), and the internals it replaces, with the parameters its wrappers
  pass on (:class:`Internal`). :meth:`Adaptation.require` looks at them once, when the bridge is
  imported, before anything else of the framework is, whatever the release's version number
  (a release is refused for what it lacks, never for its number alone):

  - all there, in the window: the bridge adapts them, silently;
  - all there, older or newer than the window: it adapts them, with one warning naming the
    untested release;
  - one missing or changed: refused, naming it ("is not there", "has changed"), the window and
    the install line: :class:`accelctl.FrameworkVersionError`, never an error from inside the
    bridge later on;
  - the framework fails to import at all (an old release beside a torch or numpy it predates):
    refused with what its import raised, the window and the install line.

docs/design/bridge-uses.md says why the list is derived from the code and checked at import.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import warnings
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from types import ModuleType
from typing import Any, NoReturn

from accelctl._contract.errors import FrameworkVersionError


@dataclass(frozen=True)
class Window:
    """The releases of ``framework`` that a bridge is tested with.

    ``framework`` is a distribution name. Every minor from ``oldest`` to ``newest``, both included
    (pre-releases and patches of those minors too)."""

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
#: The window of each framework, by the top-level module a use starts from.
BY_MODULE = {window.framework: window for window in WINDOWS}


@dataclass(frozen=True)
class Internal:
    """One of a framework's internals that a bridge replaces or calls.

    The attribute ``name`` of ``owner`` (``"module"`` or ``"module:Class"``) and, for a function,
    the names of the parameters the bridge passes, in order (``self`` included for a method)."""

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
        owner, problem = _import(module_name)
        if problem is not None:
            return problem
        if class_name:
            owner = getattr(owner, class_name, None)
            if owner is None:
                return f"is not there ({module_name} has no {class_name})"
        # The class's own attribute (a property or cached_property as itself, not its value).
        found = inspect.getattr_static(owner, self.name, None)
        if found is None:
            return "is not there"
        if self.parameters is None:
            return None
        function = getattr(found, "func", None) or getattr(found, "fget", None) or found
        if isinstance(function, (staticmethod, classmethod)):
            function = function.__func__
        try:
            taken = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            return "has changed: it is not a Python function"
        if taken[: len(self.parameters)] != self.parameters:
            return (
                f"has changed: it takes ({', '.join(taken)}), the bridge passes "
                f"({', '.join(self.parameters)})"
            )
        return None


@dataclass
class Adaptation:
    """What one bridge uses of its framework.

    The window it is tested with, the internals it replaces or calls (with the parameters its
    wrappers pass), and every name its code uses (``uses``, as
    :data:`.uses.USES` lists them). :meth:`require` once, when the
    bridge is imported; then :attr:`refusal` is ``""``."""

    bridge: str
    window: Window
    internals: tuple[Internal, ...]
    uses: tuple[str, ...] = field(default=())
    #: None until checked; then "" (adapted). A release that cannot be adapted is refused with
    #: :class:`~accelctl.FrameworkVersionError` instead.
    refusal: str | None = None

    def require(self, *, stacklevel: int = 3) -> None:
        """Refuse the installed release where the bridge cannot run on it.

        Done before the bridge imports anything else of the framework. It cannot where it fails
        to import, or a name the bridge uses is not there or changed. A release outside the window
        (older or newer) with all there is adapted, with one warning. Nothing is done where the
        framework is not installed: the bridge's own import of it says which extra installs it.

        :raises accelctl.FrameworkVersionError: naming the window and the install line.
        """
        if self.refusal:  # refused before in this process: the bridge's import is tried again
            raise FrameworkVersionError(self.refusal, name=f"accelctl.integrations.{self.bridge}")
        if self.refusal is not None:
            return
        version = installed_version(self.window.framework)
        if version is None:
            return
        try:
            importlib.import_module(self.window.framework)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == self.window.framework:
                return  # metadata without the module: the bridge's import says what installs it
            self._refuse_import(version, exc)
        except Exception as exc:  # e.g. an old release beside a torch or numpy it predates
            self._refuse_import(version, exc)
        self.check(version, stacklevel=stacklevel + 1)

    def check(self, version: str, *, stacklevel: int = 3) -> bool:
        """Say whether the bridge may adapt ``version``; refuse it otherwise.

        True when every name it uses and every internal it adapts is there as it expects (with one
        warning for a release outside the window); else refused.

        :raises accelctl.FrameworkVersionError: naming the first problem and the window.
        """
        problems = [f"{i.path} {p}" for i in self.internals if (p := i.problem()) is not None]
        problems += [p for use in self.uses if (p := use_problem(use)) is not None]
        problems = list(dict.fromkeys(problems))  # a name and a call of it: said once
        if problems:
            first = problems[0]
            framework = first.split(".", 1)[0].split(" ", 1)[0]
            own = framework == self.window.framework
            window = self.window if own else BY_MODULE.get(framework, self.window)
            seen = installed_version(window.framework) or version
            more = ""
            if problems[1:]:
                listed = "; ".join(problems[1:4]) + ("; ..." if problems[4:] else "")
                more = f" (and {len(problems) - 1} more: {listed})"
            self.refusal = (
                f"accelctl.integrations.{self.bridge} cannot run on {window.framework} {seen}: "
                f"{first}{more}. The bridge is tested with {window.text()}: "
                f"{self._install(window)}"
            )
            raise FrameworkVersionError(self.refusal, name=f"accelctl.integrations.{self.bridge}")
        self.refusal = ""
        if not self.window.covers(version):
            warnings.warn(
                f"accelctl.integrations.{self.bridge} is tested with {self.window.text()}, not "
                f"{version}; the {len(self.internals) + len(self.uses)} names it uses of "
                f"{self.window.framework} are there as it expects, so it adapts them. If a run "
                f"misbehaves, install a tested release (pip install '{self.window.pinned()}') and "
                "tell accelctl",
                UserWarning,
                stacklevel=stacklevel,
            )
        return True

    def _refuse_import(self, version: str, exc: BaseException) -> NoReturn:
        """Refuse a release that fails to import at all.

        With what its import raised (its first line: a refusal is one line), the window and the
        install line."""
        self.refusal = (
            f"accelctl.integrations.{self.bridge} cannot run on {self.window.framework} "
            f"{version}: importing it raised {_raised(exc)}. The bridge is tested with "
            f"{self.window.text()}: {self._install()}"
        )
        raise FrameworkVersionError(
            self.refusal, name=f"accelctl.integrations.{self.bridge}"
        ) from exc

    def _install(self, window: Window | None = None) -> str:
        window = window or self.window
        return (
            f"pip install '{window.pinned()}' installs a tested release (pip install "
            f"'accelctl[{self.bridge}]' the newest)"
        )


def installed_version(framework: str) -> str | None:
    """Return the installed release of ``framework``, or None.

    Its module's ``__version__`` where it is imported already, else its distribution's metadata,
    read without importing it (an old release may not import beside this torch at all); None where
    it is not installed."""
    module = sys.modules.get(framework)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version(framework)
    except metadata.PackageNotFoundError:
        return None


def _import(module_name: str) -> tuple[Any, str | None]:
    """Import the module, or return None and why it cannot be had.

    Why: "is not there (no module x)", "cannot be imported (x raised ...)": an old release that
    does not import beside this torch."""
    try:
        return importlib.import_module(module_name), None
    except ModuleNotFoundError as exc:
        if _names_module(exc, module_name):
            return None, f"is not there (no module {exc.name})"
        return None, f"cannot be imported ({module_name} raised {_raised(exc)})"
    except Exception as exc:
        return None, f"cannot be imported ({module_name} raised {_raised(exc)})"


def _raised(exc: BaseException) -> str:
    """Describe an exception as its type and the first line of its message.

    ``"ValueError: mutable default ..."``: a refusal is one line."""
    line = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _names_module(exc: ModuleNotFoundError, module_name: str) -> bool:
    """Say whether ``exc`` says ``module_name`` itself is missing.

    Or a package above it, rather than a module it imports."""
    missing = exc.name or ""
    return bool(missing) and (module_name == missing or module_name.startswith(f"{missing}."))


_MISSING = object()
#: ``self.name = ...`` (or ``self.name: T = ...``) in a module's source.
_OWN_SOURCE = re.compile(r"\bself\.(\w+)\s*(?::[^=\n]*)?=(?!=)")


def use_problem(use: str) -> str | None:
    """Say what of ``use`` is not there on the installed release; None when all is.

    None when ``use`` (``"module:Class.attribute"``, with ``(self, _, keyword)`` after a
    call: :mod:`.uses`) is there on the installed release as the bridge
    uses it; else what is not, in words ("... is not there", "... has changed: ...")."""
    target, _, call = use.partition("(")
    module_name, _, attributes = target.partition(":")
    dotted = target.replace(":", ".")
    found, problem = _import(module_name)
    if problem is not None:
        return f"{dotted} {problem}"
    raw: Any = found
    for name in attributes.split(".") if attributes else ():
        if isinstance(found, ModuleType):
            raw = getattr(found, name, _MISSING)
            if raw is _MISSING:  # ``from package import submodule``
                try:
                    raw = importlib.import_module(f"{found.__name__}.{name}")
                except ImportError:
                    return f"{dotted} is not there"
        elif isinstance(found, type):
            raw = inspect.getattr_static(found, name, _MISSING)
            if raw is _MISSING:
                if _instance_attribute(found, name):
                    return None  # set on each instance: what it holds is not known here
                return f"{dotted} is not there"
        else:
            return None  # a value's attribute: its type is not known here
        found = raw if isinstance(raw, (ModuleType, type)) else _MISSING
    if not call:
        return None
    return _signature_problem(dotted, raw, call.rstrip(")"))


def _signature_problem(dotted: str, raw: Any, call: str) -> str | None:
    passed = [part.strip() for part in call.split(",") if part.strip()]
    function = raw
    if isinstance(raw, staticmethod):
        function = raw.__func__
        passed = passed[1:] if passed[:1] == ["self"] else passed
    elif isinstance(raw, classmethod):
        function = raw.__func__
        passed = passed if passed[:1] == ["self"] else ["self", *passed]
    elif isinstance(raw, type):
        passed = passed[1:] if passed[:1] == ["self"] else passed
    elif not callable(raw):
        return None
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without one: nothing to compare
        return None
    positional = [None for part in passed if part in ("self", "_")]
    keywords = {part: None for part in passed if part not in ("self", "_", "...")}
    try:
        signature.bind(*positional, **keywords)
    except TypeError:
        shown = ", ".join(passed)
        return f"{dotted} has changed: it takes {signature}, and the bridge passes ({shown})"
    return None


def _instance_attribute(cls: type, name: str) -> bool:
    """Say whether instances of ``cls`` get the attribute ``name``.

    As a dataclass field, an annotation, a slot, or ``self.name = ...`` in the source of a
    module of its classes."""
    for klass in cls.__mro__:
        if klass is object:
            continue
        if name in getattr(klass, "__dataclass_fields__", {}) or name in vars(klass).get(
            "__annotations__", {}
        ):
            return True
        if name in (getattr(klass, "__slots__", ()) or ()):
            return True
        if name in _assigned_in(klass.__module__):
            return True
    return False


@cache
def _assigned_in(module_name: str) -> frozenset[str]:
    """The attributes the module's code sets on ``self``."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return frozenset()
    try:
        with open(path, encoding="utf-8") as source:
            return frozenset(_OWN_SOURCE.findall(source.read()))
    except OSError:
        return frozenset()


def _minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _dotted(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"

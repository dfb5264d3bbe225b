"""Replacing an internal of a bridge's framework: one record per patch, one way to apply it.

A bridge replaces an internal only where its framework has no public door for the change
(docs/design/bridge-patching.md lists each one and why). Every such replacement goes through
:meth:`Patches.apply`, which

- refuses an internal the bridge's :class:`~.versions.Adaptation` does not declare (the
  declaration is what the bridge's import checks, and what ``_shared/uses.py`` is kept equal to);
- checks the internal's shape again (:meth:`~.versions.Internal.problem`): there, and taking
  the parameters the replacement passes on;
- records what it replaced (:class:`Patch`: the owner, the name, the original, the
  replacement, why), and applies each internal once however often it is asked;
- can be undone (:meth:`Patches.undo`), as tests do to see the framework's own code again.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelctl._contract.errors import FrameworkVersionError

from .versions import Adaptation, Internal

#: Set on every replacement, so that the bridge's code can be told from the framework's.
MARK = "__accelctl_adapted__"
_MISSING = object()


@dataclass(frozen=True)
class Patch:
    """One internal replaced, with what it was, what replaces it and why.

    ``owner.name`` was ``original`` and is ``replacement``, for ``why``; ``internal`` is the
    declaration its shape was checked against."""

    bridge: str
    internal: Internal
    owner: Any
    name: str
    original: Any
    replacement: Any
    why: str
    #: Whether ``original`` was the owner's own attribute; False where it was inherited from a
    #: base class, so that undoing deletes the owner's attribute instead of copying it there.
    own: bool

    @property
    def path(self) -> str:
        """``"accelerate.state.PartialState.set_device"``: where the patch is."""
        owner = self.internal.owner.replace(":", ".")
        return f"{owner}.{self.name}"

    def is_applied(self) -> bool:
        """Whether the owner holds the replacement now."""
        return vars(self.owner).get(self.name, _MISSING) is self.replacement


class Patches:
    """The patches of one bridge, each an internal its :class:`~.versions.Adaptation` declares."""

    def __init__(self, adaptation: Adaptation) -> None:
        self.adaptation = adaptation
        self._applied: dict[tuple[int, str], Patch] = {}

    def apply(
        self,
        owner: str,
        name: str,
        build: Callable[[Any], Any],
        why: str,
        *,
        declared_as: str | None = None,
    ) -> Patch:
        """Replace ``name`` of ``owner`` with ``build(original)`` and return the record.

        ``owner`` is ``"module"`` or ``"module:Class"``, as an :class:`~.versions.Internal`
        names it. Where the patch is applied already, the same record is returned again.

        :param why: one line: what the replacement changes, for whom.
        :param declared_as: the declared internal of ``owner`` that covers ``name`` where the
            name is one of a family (the builder names DeepSpeed's ``builder_closure`` makes).
        :raises LookupError: the bridge's adaptation does not declare the internal.
        :raises accelctl.FrameworkVersionError: the internal is not there as declared.
        """
        internal = self._declared(owner, declared_as or name)
        target = _resolve(owner)
        key = (id(target), name)
        recorded = self._applied.get(key)
        if recorded is not None and recorded.is_applied():
            return recorded
        problem = internal.problem()
        if problem is None and declared_as is not None and not hasattr(target, name):
            problem = "is not there"
        if problem is not None:
            path = f"{owner.replace(':', '.')}.{name}"
            raise FrameworkVersionError(
                f"accelctl.integrations.{self.adaptation.bridge} cannot adapt {path}: it "
                f"{problem}. The bridge is tested with {self.adaptation.window.text()}",
                name=f"accelctl.integrations.{self.adaptation.bridge}",
            )
        own = vars(target).get(name, _MISSING)
        original = getattr(target, name)
        replacement = build(original)
        _mark(replacement, self.adaptation.bridge, owner, name, original)
        setattr(target, name, replacement)
        patch = Patch(
            bridge=self.adaptation.bridge,
            internal=internal,
            owner=target,
            name=name,
            original=original if own is _MISSING else own,
            replacement=replacement,
            why=why,
            own=own is not _MISSING,
        )
        self._applied[key] = patch
        return patch

    def applied(self) -> tuple[Patch, ...]:
        """The patches in place, in the order they were applied."""
        return tuple(patch for patch in self._applied.values() if patch.is_applied())

    def undo(self, *names: str) -> tuple[Patch, ...]:
        """Put the originals back, the last patch first, and return what was undone.

        With no ``names``, every patch is undone; else those of the attributes named.

        :raises RuntimeError: something else replaced a patched attribute since (undoing would
            drop that too).
        """
        undone = []
        for key, patch in reversed(list(self._applied.items())):
            if names and patch.name not in names:
                continue
            if not patch.is_applied():
                raise RuntimeError(
                    f"{patch.path} is no longer the accelctl {patch.bridge} bridge's replacement "
                    "(something replaced it since); not undoing it"
                )
            if patch.own:
                setattr(patch.owner, patch.name, patch.original)
            else:
                delattr(patch.owner, patch.name)
            del self._applied[key]
            undone.append(patch)
        return tuple(undone)

    def _declared(self, owner: str, name: str) -> Internal:
        for internal in self.adaptation.internals:
            if internal.owner == owner and internal.name == name:
                return internal
        raise LookupError(
            f"the accelctl {self.adaptation.bridge} bridge patches {owner}.{name}, which its "
            "ADAPTATION does not declare; declare it there as an Internal, so that the bridge's "
            "import checks its shape"
        )


def _resolve(owner: str) -> Any:
    """The module or class ``owner`` (``"module"`` or ``"module:Class"``) names."""
    module_name, _, class_name = owner.partition(":")
    found: Any = importlib.import_module(module_name)
    for attribute in class_name.split(".") if class_name else ():
        found = getattr(found, attribute)
    return found


def _mark(replacement: Any, bridge: str, owner: str, name: str, original: Any) -> None:
    """Mark a replacing function as the bridge's.

    Its docstring says so before the original's. A class or another value is left as it is:
    it may be the framework's own.
    """
    if not inspect.isfunction(replacement):
        return
    setattr(replacement, MARK, True)
    shown = owner.rpartition(":")[2] or owner
    note = (
        f"accelctl's adaptation of {shown}.{name} for accelctl accelerators "
        f"(accelctl.integrations, the {bridge} bridge)."
    )
    doc = getattr(original, "__doc__", None)
    replacement.__doc__ = f"{note}\n\n{doc}" if doc else note

"""Every name of a framework that a bridge's code uses, read from the code's syntax tree.

The bridges (``accelctl/integrations``) declare what they use of their frameworks in
``accelctl/integrations/_shared/uses.py``, and each bridge checks those names on the installed
release when it is imported (``accelctl.integrations._shared.versions``). This module derives the
same list from the code, so that a test keeps the declaration complete
(``tests/integrations/test_bridge_uses.py``); ``python tests/bridgeuses.py --write`` writes it anew
after a bridge changed.

What is read, in each module of a bridge (``lightning.py`` and ``_lightning/*.py``, ...):

- every import of a framework module or name (``from lightning.pytorch.strategies import
  ModelParallelStrategy``), type-checking-only imports left out;
- every attribute chain that starts from such a name (``accelerate.utils.InitProcessGroupKwargs``,
  ``PartialState._shared_state``), through a local alias of one (``move = Trainer.train``) or a
  parameter annotated with one (``trainer: pl.Trainer``);
- in a class that derives from a framework class, every attribute of ``self``, ``cls`` and
  ``super()`` the class does not define itself (``self.is_fsdp2``), read or written;
- every call of such a name: the number of positional arguments and the keywords it passes
  (``super().__init__(cpu=True)``), checked against the release's signature.

A use is written as ``"module:attr.attr"`` (the module part as imported, the attributes as the
code reaches them), with ``(self, _, name)`` after it for a call: ``self`` for the instance the
call is bound to, ``_`` for each positional argument, ``...`` for a ``*args`` of unknown length,
a keyword by name.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

INTEGRATIONS = Path(__file__).resolve().parents[1] / "core" / "accelctl" / "integrations"
#: The frameworks the bridges adapt, by the top-level module a use starts from.
FRAMEWORKS = ("lightning", "accelerate", "transformers", "ray", "deepspeed")
#: Each bridge: its public module and the private modules named after it.
BRIDGES = FRAMEWORKS


def bridge_modules(bridge: str) -> list[Path]:
    """The modules of ``bridge``: ``<bridge>.py`` and those of its package ``_<bridge>/``."""
    return [INTEGRATIONS / f"{bridge}.py", *sorted((INTEGRATIONS / f"_{bridge}").glob("*.py"))]


def shared_modules() -> list[Path]:
    """The modules no bridge owns alone (they must use no framework)."""
    owned = {path for bridge in BRIDGES for path in bridge_modules(bridge)}
    return [path for path in sorted(INTEGRATIONS.rglob("*.py")) if path not in owned]


@functools.cache
def uses_of(bridge: str) -> tuple[str, ...]:
    """Every use of a framework in ``bridge``'s modules, sorted."""
    found: set[str] = set()
    for path in bridge_modules(bridge):
        found.update(module_uses(path))
    return tuple(sorted(found))


def module_uses(path: Path) -> set[str]:
    """Every use of a framework in one module."""
    tree = ast.parse(path.read_text(), str(path))
    walker = _Walker(tree)
    walker.visit(tree)
    return walker.uses


@dataclass
class _Scope:
    """What names stand for where the walker is: framework paths, or a bridge class's instance.

    Several paths for a value declared as one of several classes.
    """

    names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Names of instances: of framework classes (annotated), or of a bridge class (narrowed).
    instances: dict[str, str] = field(default_factory=dict)
    #: The bridge class whose method this is (its ``self``, ``cls`` and ``super()``).
    owner: str | None = None


@dataclass
class _Class:
    """A class of the module: its framework base (through bridge classes too) and its own names."""

    base: str | None
    own: set[str]


#: Python's own attributes of every class: not the framework's.
_PYTHONS = frozenset({"__dict__", "__doc__", "__qualname__", "__module__", "__class__", "__name__"})


class _Walker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.uses: set[str] = set()
        #: The modules imported as modules (``import ray.train.torch``): the module part of a use.
        self.modules: set[str] = set()
        self.globals: dict[str, tuple[str, ...]] = {}
        self.annotation_names: dict[str, tuple[str, ...]] = {}
        self.classes: dict[str, _Class] = {}
        self.scopes: list[_Scope] = [_Scope(self.globals)]
        self._collect_imports(tree)
        self._collect_declared(tree)
        self._collect_classes(tree)

    # -- the module's names ---------------------------------------------------------------

    def _collect_imports(self, tree: ast.Module) -> None:
        typing_only = {
            id(node) for block in _type_checking_blocks(tree) for node in ast.walk(block)
        }
        imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in imports:  # the modules first: they are the module part of every use
            self.modules.update(path for _, path, module in _imported(node) if module)
        for node in imports:
            target = self.annotation_names if id(node) in typing_only else self.globals
            for name, path, module in _imported(node):
                if name:
                    target[name] = (path,)
                if target is self.globals:
                    self.uses.add(path if module else self._spelled(path))

    def _collect_declared(self, tree: ast.Module) -> None:
        """``Name = Annotated[Any, "module:Class", ...]``: a value the code reaches untyped.

        It is declared as an instance of one of those framework classes
        (``_shared.versions.Framework``)."""
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            if not (isinstance(target, ast.Name) and isinstance(value, ast.Subscript)):
                continue
            if not (isinstance(value.value, ast.Name) and value.value.id == "Annotated"):
                continue
            elements = value.slice.elts if isinstance(value.slice, ast.Tuple) else []
            declared = tuple(
                e.value.replace(":", ".")
                for e in elements[1:]
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
            if declared:
                self.annotation_names[target.id] = declared
                for path in declared:
                    self.modules.add(path.rsplit(".", 1)[0])
                    self.uses.add(self._spelled(path))

    def _collect_classes(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            base = None
            for expression in node.bases:
                resolved = self._paths(expression, _Scope(self.globals))
                if resolved:
                    base = resolved[0]
                    break
                if isinstance(expression, ast.Name) and expression.id in self.classes:
                    base = self.classes[expression.id].base
            self.classes[node.name] = _Class(base, _own_names(node))
        # A class deriving from a bridge class inherits what that class defines.
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for expression in node.bases:
                    if isinstance(expression, ast.Name) and expression.id in self.classes:
                        self.classes[node.name].own |= self.classes[expression.id].own

    def _spelled(self, path: str) -> str:
        """``"a.b.c.d"`` as ``"a.b:c.d"``, where ``a.b`` is the longest module imported."""
        parts = path.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if module in self.modules or cut == 1:
                rest = ".".join(parts[cut:])
                return f"{module}:{rest}" if rest else module
        raise AssertionError(path)

    # -- resolving expressions ------------------------------------------------------------

    def _lookup(self, name: str, scope: _Scope) -> tuple[str, ...]:
        for names in (scope.names, self.globals):
            if name in names:
                return names[name]
        return ()

    def _receiver(self, node: ast.expr, scope: _Scope) -> tuple[str, str | None] | None:
        """Return the framework class of ``self``, ``cls`` or ``super()`` in a bridge method.

        In a bridge class's method, or of a name narrowed to a bridge class; with the bridge class
        whose own names are not uses (None for ``super()``); None elsewhere.
        """
        owner = scope.owner
        if isinstance(node, ast.Name) and node.id in scope.instances:
            owner = scope.instances[node.id]
        elif not (isinstance(node, ast.Name) and node.id in ("self", "cls")):
            owner = owner if _is_super(node) else None
        if owner is None or owner not in self.classes or self.classes[owner].base is None:
            return None
        base = self.classes[owner].base
        assert base is not None
        return base, None if _is_super(node) else owner

    def _paths(self, node: ast.expr, scope: _Scope) -> tuple[str, ...]:
        """The framework paths ``node`` stands for (a name, an attribute chain), or ()."""
        if isinstance(node, ast.Name):
            return self._lookup(node.id, scope)
        if not isinstance(node, ast.Attribute):
            return ()
        receiver = self._receiver(node.value, scope)
        if receiver is not None:
            base, owner = receiver
            if owner is not None and node.attr in self.classes[owner].own:
                return ()
            inner: tuple[str, ...] = (base,)
        else:
            inner = self._paths(node.value, scope)
        if node.attr in _PYTHONS or any(p.rsplit(".", 1)[-1] in _PYTHONS for p in inner):
            return ()
        return tuple(f"{path}.{node.attr}" for path in inner)

    def _is_instance(self, node: ast.expr, scope: _Scope) -> bool:
        """Whether ``node`` is an instance (self, an annotated parameter).

        A call of one of its methods passes it as the first argument.
        """
        if self._receiver(node, scope) is not None:
            return True
        return isinstance(node, ast.Name) and node.id in scope.instances

    def _annotation(self, node: ast.expr | None) -> tuple[str, ...]:
        if node is None:
            return ()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node = ast.parse(node.value, mode="eval").body
        return self._paths(node, _Scope({**self.globals, **self.annotation_names}))

    # -- visiting ---------------------------------------------------------------------------

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._visit_function(child, owner=node.name)
            else:
                self.visit(child)
        for expression in [*node.bases, *node.decorator_list]:
            self.visit(expression)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_function(node, owner=self.scopes[-1].owner)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _visit_function(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None
    ) -> None:
        outer = self.scopes[-1]
        scope = _Scope(dict(outer.names), dict(outer.instances), owner)
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        for argument in arguments:
            annotated = self._annotation(argument.annotation)
            if annotated:  # ``self`` too, where a wrapper declares what it is handed
                scope.names[argument.arg] = annotated
                scope.instances.pop(argument.arg, None)
                scope.instances[argument.arg] = ""  # an instance of a framework class
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.scopes.append(scope)
        for child in node.body:
            self.visit(child)
        self.scopes.pop()

    def visit_Assert(self, node: ast.Assert) -> None:
        # ``assert isinstance(x, BridgeClass)``: ``x`` is that class's instance from here on.
        test = node.test
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "isinstance"
            and len(test.args) == 2
            and isinstance(test.args[0], ast.Name)
            and isinstance(test.args[1], ast.Name)
            and test.args[1].id in self.classes
        ):
            scope = self.scopes[-1]
            scope.names.pop(test.args[0].id, None)
            scope.instances[test.args[0].id] = test.args[1].id
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        resolved = self._paths(node.value, self.scopes[-1])
        for target in node.targets:
            if isinstance(target, ast.Name) and resolved and len(self.scopes) > 1:
                self.scopes[-1].names[target.id] = resolved
            self.visit(target)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        paths = self._paths(node, self.scopes[-1])
        if paths:
            self.uses.update(self._spelled(path) for path in paths)
            return  # the chain's inner parts are prefixes of this use
        self.visit(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        self.uses.update(self._spelled(path) for path in self._lookup(node.id, self.scopes[-1]))

    def visit_Call(self, node: ast.Call) -> None:
        scope = self.scopes[-1]
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 2:
            # getattr(x, "name") without a default: the attribute must be there.
            target, name = node.args
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                attribute = ast.Attribute(value=target, attr=name.value, ctx=ast.Load())
                self.uses.update(self._spelled(p) for p in self._paths(attribute, scope))
            return
        paths = self._paths(node.func, scope)
        if not paths:
            return
        bound = isinstance(node.func, ast.Attribute) and self._is_instance(node.func.value, scope)
        passed = ["self"] if bound else []
        for argument in node.args:
            passed.append("..." if isinstance(argument, ast.Starred) else "_")
        passed += [keyword.arg for keyword in node.keywords if keyword.arg is not None]
        self.uses.update(f"{self._spelled(path)}({', '.join(passed)})" for path in paths)


def _is_super(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def _imported(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str, bool]]:
    """(the name bound, the framework path it stands for, whether it is a module)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] not in FRAMEWORKS:
                continue
            if alias.asname:
                yield alias.asname, alias.name, True
            else:
                root = alias.name.split(".")[0]
                yield root, root, True
                # ``import ray.train.torch`` makes ``ray.train.torch`` a module of the chain too.
                parts = alias.name.split(".")
                for cut in range(2, len(parts) + 1):
                    yield "", ".".join(parts[:cut]), True
        return
    if node.level or node.module is None or node.module.split(".")[0] not in FRAMEWORKS:
        return
    for alias in node.names:
        yield alias.asname or alias.name, f"{node.module}.{alias.name}", False
    yield "", node.module, True


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _type_checking_blocks(tree: ast.AST) -> Iterable[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from node.body


def _own_names(node: ast.ClassDef) -> set[str]:
    """Return the names a bridge class defines itself: methods, class and instance attributes.

    Not those declared for the type checker only; instance attributes are those ``__init__`` sets on
    ``self``.
    """
    own: set[str] = set()
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(child.name)
        elif isinstance(child, ast.Assign):
            own.update(t.id for t in child.targets if isinstance(t, ast.Name))
        elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
            own.add(child.target.id)
        if isinstance(child, ast.FunctionDef) and child.name == "__init__":
            for inner in ast.walk(child):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.ctx, ast.Store)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == "self"
                ):
                    own.add(inner.attr)
    return own


def declaration() -> str:
    """The text of ``accelctl/integrations/_shared/uses.py`` for the bridges' code as it stands."""
    lines = [
        '"""Every name of its framework that each bridge uses on the paths it runs.',
        "",
        "What ``accelctl.integrations._shared.versions`` checks on the installed release when the",
        "bridge is imported (docs/design/bridge-uses.md).",
        "",
        "Derived from the bridges' code by tests/bridgeuses.py, which writes this file",
        "(``python tests/bridgeuses.py --write``); tests/integrations/test_bridge_uses.py",
        'fails while it differs from the code. Not edited by hand."""',
        "",
        "USES: dict[str, tuple[str, ...]] = {",
    ]
    for bridge in BRIDGES:
        lines.append(f"    {json.dumps(bridge)}: (")
        lines += [f"        {json.dumps(use)}," for use in uses_of(bridge)]
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        (INTEGRATIONS / "_shared" / "uses.py").write_text(declaration())
    else:
        sys.stdout.write(declaration())

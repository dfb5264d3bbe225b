"""The ``accelctl`` package's import graph, read from the modules' text with :mod:`ast`.

For the tests of its dependencies (tests/core/test_dependencies.py: the direction rule;
tests/core/test_import_cycles.py: no cycle). An import inside a function, under ``TYPE_CHECKING`` or
through ``importlib`` counts as much as one at the top of a module: a cycle put off to run time is
still a cycle of ideas.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Mapping
from pathlib import Path

import accelctl

CORE = Path(accelctl.__file__).resolve().parent


#: A string that names a module the way ``importlib`` and entry points take one:
#: ``"accelctl.cli.list_cmd"`` or ``"accelctl.cli.list_cmd:list_command"``.
_MODULE_STRING = re.compile(r"(?P<module>accelctl(?:\.\w+)+)(?::\w+)?")


def module_name(path: Path, root: Path = CORE.parent) -> str:
    """Return a module's dotted name: ``accelctl.cli.main`` for ``core/accelctl/cli/main.py``.

    A package's ``__init__.py`` is the package.
    """
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules(root: Path = CORE.parent) -> dict[str, Path]:
    """Map every module of the ``accelctl`` package under ``root`` to its file.

    The kit's and the bridges' modules included.
    """
    return {
        module_name(path, root): path
        for path in sorted((root / "accelctl").rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def imports_in(
    source: str, module: str, is_package: bool, known: set[str], strings: bool = True
) -> set[str]:
    """Return the ``accelctl`` modules that ``source`` imports, anywhere in it.

    ``source`` is the text of ``module``: ``import a.b`` (``a.b``), ``from a import b`` (``a.b``
    when it is one of ``known``, else ``a``), relative imports resolved,
    ``importlib.import_module("a.b")`` and ``__import__("a.b")`` with a literal name, and a string
    that is the name of one of ``known``, with or without ``:attribute`` (a table of modules
    imported later, an entry point).
    """
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # `from a import b` imports module a.b where b is one, else a name of module a
            found.update(
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            )
        elif isinstance(node, ast.Call) and _names_import(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _MODULE_STRING.fullmatch(node.value)
            if match and match.group("module") in known:
                found.add(match.group("module"))
    return {name for name in found if name == "accelctl" or name.startswith("accelctl.")}


def _names_import(func: ast.expr) -> bool:
    """``importlib.import_module``, a bare ``import_module`` or ``__import__``."""
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


@functools.cache
def import_graph(root: Path = CORE.parent, strings: bool = True) -> dict[str, frozenset[str]]:
    """Map each ``accelctl`` module under ``root`` to the ``accelctl`` modules it imports.

    See :func:`imports_in`; itself excluded. ``strings``: a string naming a module counts (for the
    direction rule: an entry point or a lazy table is a dependency; not for cycles: a name looked up
    when asked is no import at load).
    """
    known = set(modules(root))
    graph = {}
    for module, path in modules(root).items():
        is_package = path.name == "__init__.py"
        found = imports_in(path.read_text(), module, is_package, known, strings)
        graph[module] = frozenset(found - {module})
    return graph


def cycles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Return the cycles: strongly connected components of more than one module, or a self-import.

    Tarjan's algorithm; each component sorted.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found

"""The shape of the Trainer's code: a fit's state in one object, and imports one way, no cycle.

Not in long argument lists; the training path's modules import each other one way.

Read from the source with ``ast``: every ``def`` counts, nested ones and methods too, and every
import statement, at module level, inside a function or under ``TYPE_CHECKING`` alike (a cycle
through a type-only import is still a cycle of ideas). Records made by ``@dataclass`` are not
``def``s and are not counted: they are built by keyword.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import accelctl

PACKAGE = Path(accelctl.__file__).parent
#: The modules of the training path: the Trainer and its parts.
TRAINING_PATH = sorted((PACKAGE / "_training").glob("*.py"))
#: Parameters a function may take, ``self`` and ``cls`` not counted.
MOST_PARAMETERS = 6
#: The user's API: ``Trainer(...)``'s arguments are the documented ones (docs/training.md).
PUBLIC_EXCEPTIONS = {"accelctl._training.trainer.Trainer.__init__"}


def module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def functions(tree: ast.AST, prefix: str) -> Iterator[tuple[str, ast.arguments]]:
    """Every ``def`` under ``tree`` by its qualified name, with its arguments."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}.{node.name}", node.args
            yield from functions(node, f"{prefix}.{node.name}")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}.{node.name}")
        else:
            yield from functions(node, prefix)


def parameter_count(arguments: ast.arguments) -> int:
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None)


def long_signatures(paths: list[Path]) -> dict[str, int]:
    """The functions of ``paths`` that take more than :data:`MOST_PARAMETERS` parameters."""
    found = {}
    for path in paths:
        for name, arguments in functions(ast.parse(path.read_text()), module_name(path)):
            if parameter_count(arguments) > MOST_PARAMETERS:
                found[name] = parameter_count(arguments)
    return found


def imports(path: Path, root: Path = PACKAGE.parent) -> Iterator[tuple[str, bool]]:
    """The accelctl modules ``path`` imports, and whether each import sits inside a function."""
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    inside = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
    }
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # ``from . import fanout`` imports a module; ``from .x import y``, module x.
            names = [
                f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}", root) else base
                for alias in node.names
            ]
        for name in names:
            if name == "accelctl" or name.startswith("accelctl."):
                yield name, id(node) in inside


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_no_function_of_the_training_path_takes_more_than_six_parameters() -> None:
    """No function of the training path takes more than six parameters.

    State that lives across calls is an object (a fit): its methods read it, rather than a dozen
    arguments threaded through functions (STYLE.md).
    """
    offenders = {
        name: count
        for name, count in long_signatures(TRAINING_PATH).items()
        if name not in PUBLIC_EXCEPTIONS
    }
    assert not offenders, (
        f"more than {MOST_PARAMETERS} parameters (self and cls not counted): "
        + ", ".join(f"{name} takes {count}" for name, count in sorted(offenders.items()))
        + "; keep what lives across calls in an object (accelctl._training.fit.Fit) instead"
    )


def test_the_counting_sees_long_signatures_nested_ones_and_keyword_only_ones() -> None:
    """The check above fails where it should (a check that passes on anything proves nothing)."""
    tree = ast.parse(
        "def short(a, b, c, d, e, f): ...\n"
        "def long(a, b, c, d, e, *, f, g): ...\n"
        "class Holder:\n"
        "    def method(self, a, b, c, d, e, f): ...\n"
        "    def outer(self):\n"
        "        def inner(a, b, c, d, e, *args, **kwargs): ...\n"
    )
    counts = {name: parameter_count(arguments) for name, arguments in functions(tree, "sample")}
    long = {name for name, count in counts.items() if count > MOST_PARAMETERS}
    assert long == {"sample.long", "sample.Holder.outer.inner"}
    assert counts["sample.Holder.method"] == 6


def test_the_training_path_imports_accelctls_modules_at_module_level() -> None:
    """The training path imports accelctl's own modules at module level, never inside functions.

    Imports inside functions are for heavy or optional third-party modules (torch, tqdm, NumPy),
    never to hide a cycle among accelctl's own modules.
    """
    hidden = [
        f"{module_name(path)} imports {name} inside a function"
        for path in TRAINING_PATH
        for name, inside in imports(path)
        if inside
    ]
    assert not hidden, "; ".join(hidden)


def attributes_set_later(source: str) -> dict[str, list[str]]:
    """Per class of ``source``, list the ``self`` attributes that ``__init__`` does not set.

    Those it only declares (an annotation without a value) or that another method sets first.
    """
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        made: set[str] = set()
        later: list[str] = []
        methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        for method in sorted(methods, key=lambda m: m.name != "__init__"):
            for statement in ast.walk(method):
                targets: list[ast.expr] = []
                if isinstance(statement, ast.Assign):
                    targets = [
                        t
                        for target in statement.targets
                        for t in (target.elts if isinstance(target, ast.Tuple) else [target])
                    ]
                elif isinstance(statement, ast.AnnAssign):
                    targets = [statement.target]
                    if statement.value is None and method.name == "__init__":
                        later.append(f"{ast.unparse(statement.target)} (declared, unset)")
                        continue
                for target in targets:
                    if not (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        continue
                    if method.name == "__init__":
                        made.add(target.attr)
                    elif target.attr not in made:
                        later.append(f"self.{target.attr} (first set in {method.name})")
        if later:
            found[node.name] = later
    return found


def test_a_fit_sets_every_attribute_when_it_is_made() -> None:
    """A fit's state is whole from the start: the set-up builds one record handed to the epochs.

    The record is ``fit_state.Training``; never attributes left unset until a later phase fills them
    in.
    """
    for name in ("fit.py", "epochs.py"):
        late = attributes_set_later((PACKAGE / "_training" / name).read_text())
        assert not late, f"_training/{name}: {late}"


def test_the_late_attribute_check_sees_declared_and_late_attributes() -> None:
    """The check above fails where it should."""
    late = attributes_set_later(
        "class Phased:\n"
        "    def __init__(self):\n"
        "        self.ready = 1\n"
        "        self.optimizer: object\n"
        "    def set_up(self):\n"
        "        self.ready, self.loader = 2, 3\n"
        "class Whole:\n"
        "    def __init__(self):\n"
        "        self.a = self.b = None\n"
        "    def step(self):\n"
        "        self.a = 1\n"
    )
    assert late == {
        "Phased": ["self.optimizer (declared, unset)", "self.loader (first set in set_up)"]
    }

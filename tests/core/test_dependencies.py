"""Dependencies point one way: the kit and the bridges import the core, never the reverse.

The conformance kit (``accelctl.testing``) and the bridges (``accelctl.integrations``) import the
core; no module of the core imports them, in any form (docs/concepts.md section 4a). Read from the
modules' text with :mod:`ast`, so an import inside a function, under ``TYPE_CHECKING`` or through
``importlib`` counts as much as one at the top of a module.

:func:`import_graph` is the core's import graph, for this rule and for any other about the
modules' dependencies (no cycle among them, say).
"""

from __future__ import annotations

import re

import pytest
from importgraph import CORE, import_graph, imports_in, modules

#: The layers above the core, inside the ``accelctl`` distribution.
LAYERS_ABOVE = ("accelctl.testing", "accelctl.integrations")

#: The docs' table of the core's private modules the layers above import.
DOCS = CORE.parents[1] / "docs" / "concepts.md"
_LAYER_WORDS = {"kit": "accelctl.testing", "bridges": "accelctl.integrations"}


def in_layer_above(module: str) -> bool:
    return any(module == layer or module.startswith(f"{layer}.") for layer in LAYERS_ABOVE)


def test_no_module_of_the_core_imports_the_kit_or_the_bridges() -> None:
    graph = import_graph()
    assert "accelctl.testing.checks" in graph and "accelctl.integrations.lightning" in graph
    upward = {
        module: sorted(target for target in targets if in_layer_above(target))
        for module, targets in graph.items()
        if not in_layer_above(module)
    }
    assert {module: targets for module, targets in upward.items() if targets} == {}


def documented_private_use() -> dict[str, set[str]]:
    """docs/concepts.md section 4a's table: layer -> the core's private modules it uses."""
    text = DOCS.read_text()
    section = text[text.index("## 4a.") : text.index("## 5.")]
    used: dict[str, set[str]] = {layer: set() for layer in LAYERS_ABOVE}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] and set(cells[0].split(", ")) <= set(_LAYER_WORDS):
            for word in cells[0].split(", "):
                used[_LAYER_WORDS[word]] |= set(re.findall(r"`(accelctl\.[\w.]+)`", cells[1]))
    return used


def test_the_private_modules_the_layers_above_use_are_the_documented_ones() -> None:
    # Everything else they take from the core is public (accelctl.__all__, accelctl.hookspecs,
    # accelctl.torch_build); a new private name used from above is a decision the docs record.
    graph = import_graph()
    documented = documented_private_use()
    for layer in LAYERS_ABOVE:
        used = {
            target
            for module, targets in graph.items()
            if module == layer or module.startswith(f"{layer}.")
            for target in targets
            if not in_layer_above(target) and "._" in target
        }
        assert used == documented[layer], layer


@pytest.mark.parametrize(
    ("source", "module", "imported"),
    [
        ("import accelctl.testing", "accelctl.cli.main", "accelctl.testing"),
        ("import accelctl.testing.checks as c", "accelctl.cli.main", "accelctl.testing.checks"),
        ("from accelctl import testing", "accelctl.cli.main", "accelctl.testing"),
        ("from accelctl.testing import validate", "accelctl.cli.main", "accelctl.testing"),
        ("from ..testing import validate", "accelctl.cli.main", "accelctl.testing"),
        ("from .. import testing", "accelctl.cli.main", "accelctl.testing"),
        ("from . import testing", "accelctl", "accelctl.testing"),
        ("from .testing import checks", "accelctl.plotting", "accelctl.testing.checks"),
        (
            "def f():\n    from accelctl.integrations import lightning",
            "accelctl._x",
            "accelctl.integrations.lightning",
        ),
        ("if TYPE_CHECKING:\n    import accelctl.testing", "accelctl._x", "accelctl.testing"),
        ("importlib.import_module('accelctl.testing')", "accelctl._x", "accelctl.testing"),
        (
            "import_module('accelctl.integrations.accelerate')",
            "accelctl._x",
            "accelctl.integrations.accelerate",
        ),
        ("__import__('accelctl.testing')", "accelctl._x", "accelctl.testing"),
        (
            "TABLE = {'v': 'accelctl.testing.command:validate_command'}",
            "accelctl.cli.main",
            "accelctl.testing.command",
        ),
    ],
)
def test_every_form_of_import_is_seen(source: str, module: str, imported: str) -> None:
    known = set(modules())
    is_package = module == "accelctl"
    assert imported in imports_in(source, module, is_package, known)


def test_prose_that_names_a_module_is_not_an_import() -> None:
    source = '"""Run the checks of :mod:`accelctl.testing` (see accelctl.testing.checks)."""'
    assert imports_in(source, "accelctl._x", False, set(modules())) == set()

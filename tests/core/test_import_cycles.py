"""The core's modules import each other without a cycle, counting every ``import``.

At module level, inside a function or under ``TYPE_CHECKING``, so that no cycle hides behind an
import put off to run time (tests/importgraph.py reads them). ``accelctl/__init__.py``'s lazy
``__getattr__`` names its modules as strings, which is no import. The whole package: the core, the
training path, the conformance kit and the bridges.
"""

from __future__ import annotations

from pathlib import Path

from importgraph import cycles, import_graph


def test_the_walk_sees_imports_of_every_kind() -> None:
    graph = import_graph()
    # under TYPE_CHECKING only: the package's lazily loaded names
    assert "accelctl._choice.selection" in graph["accelctl"]
    # relative `from . import x`, at module level
    assert "accelctl._host.fanout" in graph["accelctl._host.registry"]
    # inside a function: env's `import accelctl` for the installed version
    assert "accelctl" in graph["accelctl.cli.env_cmd"]
    # the CLI's package-relative imports (`from .._registry import ...`)
    assert "accelctl._host.registry" in graph["accelctl.cli.list_cmd"]


def test_the_core_has_no_import_cycle() -> None:
    found = cycles(import_graph(strings=False))
    assert found == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in found)


def test_type_only_and_function_level_imports_make_a_cycle(tmp_path: Path) -> None:
    """A cycle through a TYPE_CHECKING import or a function-level import is found.

    Two shapes: ``_training/epoch`` importing the Trainer under TYPE_CHECKING, and
    ``_training/best`` importing ``checkpoint`` inside a function.
    """
    package = tmp_path / "accelctl"
    (package / "_training").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_training" / "__init__.py").write_text("")
    (package / "_trainer.py").write_text("from ._training.epoch import train_epoch\n")
    (package / "_training" / "epoch.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .._trainer import Trainer\n"
    )
    (package / "_training" / "best.py").write_text("def f():\n    from .checkpoint import E\n")
    (package / "_training" / "checkpoint.py").write_text("from .best import f\n")
    (package / "_training" / "data.py").write_text("from .. import _trainer\n")
    assert sorted(cycles(import_graph(tmp_path))) == [
        ["accelctl._trainer", "accelctl._training.epoch"],
        ["accelctl._training.best", "accelctl._training.checkpoint"],
    ]


def test_the_cycle_finder_names_every_module_of_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["e"]]

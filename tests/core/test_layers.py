"""The core's packages import only the rows printed before theirs in CONTRIBUTING.md's map.

Each row of "Where to start reading" imports only the rows printed before it (the lower layers),
never one beside or after it, so the folders show the architecture; a new import that would run back
up fails here, naming the modules.

A room is a package folder (``_host/``) or a module of the package root (``hookspecs``); the
package's own ``__init__.py`` is the room ``accelctl``. Imports are read from the modules'
syntax (:mod:`importgraph`), inside functions and under ``TYPE_CHECKING`` included; a module
named in a string is looked up when asked, not imported (as for the cycle test).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from importgraph import CORE, import_graph

CONTRIBUTING = CORE.parents[1] / "CONTRIBUTING.md"


def mapped_rows() -> list[list[str]]:
    """Return CONTRIBUTING's map, ground first: each row's rooms.

    Rooms such as ``_base``, ``hookspecs``, and ``accelctl`` for the package's ``__init__``.
    """
    text = CONTRIBUTING.read_text()
    section = text[text.index("## Where to start reading") :]
    section = section[: section.index("\n## ")]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            names = re.findall(r"`([\w.]+)/?`", cells[0])
            rows.append(["accelctl" if name == "__init__" else name for name in names])
    return rows


def room(module: str) -> str:
    """Return the room of ``module``: ``accelctl._host.handle`` -> ``_host``.

    ``accelctl.hookspecs`` -> ``hookspecs``; ``accelctl`` -> ``accelctl``.
    """
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "accelctl"


def test_every_room_of_the_package_is_on_the_map_once() -> None:
    rows = mapped_rows()
    mapped = [name for row in rows for name in row]
    assert len(mapped) == len(set(mapped)), mapped
    assert set(mapped) == {room(module) for module in import_graph()}


def imports_up(graph: Mapping[str, Collection[str]], rows: list[list[str]]) -> list[str]:
    """List ``module -> target`` for each import of ``graph`` that does not run up the rows.

    An import into a room on the importer's row, or on a row below it.
    """
    level = {name: number for number, row in enumerate(rows) for name in row}
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if room(target) != room(module) and level[room(target)] >= level[room(module)]
    )


def test_each_row_imports_only_the_rows_above_it() -> None:
    assert imports_up(import_graph(strings=False), mapped_rows()) == []


def test_an_import_down_or_within_a_room_passes_one_up_or_beside_does_not() -> None:
    rows = [["_base"], ["_contract", "stats_keys"], ["_host"]]
    graph = {
        "accelctl._host.handle": {"accelctl._contract.errors", "accelctl._host.status"},
        "accelctl._contract.errors": {"accelctl._base.text", "accelctl._host.handle"},
        "accelctl._contract.info": {"accelctl.stats_keys"},
        "accelctl._base.text": set(),
    }
    assert imports_up(graph, rows) == [
        "accelctl._contract.errors -> accelctl._host.handle",
        "accelctl._contract.info -> accelctl.stats_keys",
    ]

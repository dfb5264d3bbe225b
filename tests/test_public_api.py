"""The public API is exactly what the docs promise; every other module of the core is private.

``accelctl.__all__`` equals the names of docs/concepts.md section 4, each one importable.
"""

from __future__ import annotations

import re
from pathlib import Path

import accelctl

CONCEPTS = Path(__file__).resolve().parents[1] / "docs" / "concepts.md"
CORE = Path(accelctl.__file__).parent

#: Modules the docs name as public; every other module or package of the core starts with "_".
PUBLIC_MODULES = {
    "hookspecs",
    "testing",
    "integrations",
    "cli",
    "launcher",
    "torch_build",
    "torch_backends",
    "capabilities",
    "exporters",
    "plotting",
    "stats_keys",
}


def _documented_names() -> set[str]:
    text = CONCEPTS.read_text()
    section = text[text.index("## 4. Library API") : text.index("## 5.")]
    block = section[
        section.index("```python") : section.index("```", section.index("```python") + 9)
    ]
    block = re.sub(r'"[^"\n]*"', "", block)  # strings are values, not names
    names = set(re.findall(r"\baccelctl\.([A-Za-z_]\w*)", block))
    # "a / b / c" lists after one accelctl. prefix
    for line in block.splitlines():
        first = re.search(r"accelctl\.(\w+)((?:\s*/\s*\w+)+)", line)
        if first:
            names.update(re.findall(r"/\s*(\w+)", first.group(2)))
    return names


def test_all_is_what_the_docs_promise() -> None:
    documented = _documented_names()
    assert set(accelctl.__all__) == documented, (
        f"only in __all__: {sorted(set(accelctl.__all__) - documented)}; "
        f"only in the docs: {sorted(documented - set(accelctl.__all__))}"
    )


def test_every_public_name_is_there() -> None:
    for name in accelctl.__all__:
        assert getattr(accelctl, name) is not None, name


def test_every_other_module_is_private() -> None:
    modules = {
        path.stem if path.is_file() else path.name
        for path in CORE.iterdir()
        if (path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()))
        and path.stem not in ("__init__", "__main__")
    }
    public = {name for name in modules if not name.startswith("_")}
    assert public == PUBLIC_MODULES

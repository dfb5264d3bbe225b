"""The README's install line works as written from a fresh clone, checked offline and in-process.

Every ``-e PATH`` is a project of this checkout, every extra it or the docs name
(``accelctl[lightning]``) exists, the line's requirements are satisfied by what this environment has
(which each test session installs from the same projects, noxfile.py), and they bring numpy, without
which every command that imports torch prints ``Failed to initialize NumPy`` (torch's CPU wheel does
not depend on it).

What cannot be checked offline, that an index serves these versions, is left to CI's fresh
clone; the Accelerate block of the README is run by tests/hf.
"""

from __future__ import annotations

import itertools
import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = "<!-- tests/test_readme_commands.py checks the next block -->"


def install_line() -> str:
    """The one command of the block after the marker (a fenced ``bash`` block)."""
    text = README.read_text()
    assert MARKER in text, "the README's install block lost its marker"
    block = text.split(MARKER, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    [line] = [line for line in block.splitlines() if line.strip()]
    return line


def installs(line: str) -> list[tuple[str, list[str]]]:
    """Each ``pip install`` / ``uv pip install`` of ``line``: (installer, its arguments)."""
    found = []
    for command in line.split("&&"):
        words = shlex.split(command)
        for start in range(len(words) - 1):
            if words[start : start + 2] == ["pip", "install"]:
                found.append((" ".join(words[: start + 2]), words[start + 2 :]))
                break
    return found


def requirements(line: str) -> list[Requirement]:
    """The line's requirements, ``-e PATH[extras]`` as the project at PATH with those extras."""
    wanted = []
    for _, arguments in installs(line):
        editable = False
        for argument in arguments:
            if argument == "-e":
                editable = True
                continue
            if editable:
                path, _, extras = argument.partition("[")
                project = tomllib.loads((ROOT / path / "pyproject.toml").read_text())["project"]
                wanted.append(Requirement(f"{project['name']}[{extras.rstrip(']')}]"))
                editable = False
            elif not argument.startswith("-"):
                wanted.append(Requirement(argument))
    return wanted


def closure(wanted: list[Requirement]) -> dict[str, str]:
    """Return every distribution the requirements pull in, with its installed version.

    Asserting that it satisfies every requirement on it met on the way.
    """
    seen: dict[str, str] = {}
    queue = [(requirement, "the README's line") for requirement in wanted]
    expanded: set[tuple[str, str]] = set()
    while queue:
        requirement, by = queue.pop()
        name = canonicalize_name(requirement.name)
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{requirement} (wanted by {by}) is not installed in this environment")
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{requirement} (wanted by {by}) is not met by the installed {name} {version}"
        )
        seen[name] = version
        for extra in ["", *sorted(requirement.extras)]:
            if (name, extra) in expanded:
                continue
            expanded.add((name, extra))
            for text in metadata.requires(name) or []:
                nested = Requirement(text)
                environment = {"extra": extra}
                if nested.marker is None or nested.marker.evaluate(environment):
                    if nested.marker is not None or not extra:
                        queue.append((nested, f"{name}[{extra}]" if extra else name))
    return seen


def test_every_editable_path_is_a_project_of_this_checkout() -> None:
    line = install_line()
    paths = [b for _, args in installs(line) for a, b in itertools.pairwise(args) if a == "-e"]
    assert paths, line
    for path in paths:
        assert (ROOT / path.partition("[")[0] / "pyproject.toml").is_file(), path


def test_every_extra_the_readme_and_docs_name_exists() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["optional-dependencies"])  # fmt: skip
    named = {}
    # accelctl[x] anywhere; '.[x]' in the README, whose commands run in the clone's root (the
    # author's guide's '.[test]' is the generated plugin's own extra).
    pattern = {README: r"(?:accelctl|')\.?\[([a-z,-]+)\]"}
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for extra in re.findall(pattern.get(page, r"accelctl\[([a-z,-]+)\]"), page.read_text()):
            for one in extra.split(","):
                named.setdefault(one, page.name)
    assert named, "no extra named anywhere: the pattern is wrong"
    assert {extra: page for extra, page in named.items() if extra not in extras} == {}


def test_the_install_line_is_met_by_this_environment_and_brings_numpy() -> None:
    installed = closure(requirements(install_line()))
    assert {"accelctl", "accelctl-cpu", "torch", "pytest"} <= set(installed)
    assert "numpy" in installed, (
        "the README's install line installs no numpy: every command that imports torch would "
        "print 'Failed to initialize NumPy'"
    )


def test_the_documentation_list_names_every_page() -> None:
    section = README.read_text().split("## Documentation", 1)[1].split("\n## ", 1)[0]
    pages = sorted(path.name for path in (ROOT / "docs").glob("*.md"))
    assert pages, "no docs/*.md found: the path is wrong"
    assert [page for page in pages if f"(docs/{page})" not in section] == []


#: A requirement quoted in the docs: `` `lightning>=2.3` ``, `` `ray[train]>=2.57` ``.
QUOTED_REQUIREMENT = r"`([a-z][a-z0-9_-]*)(?:\[[a-z,]+\])?(>=[^`<,]+)`"


def test_every_floor_the_docs_quote_is_the_extras() -> None:
    """A requirement of an extra quoted in the docs is the one pyproject.toml declares.

    Such as `` `lightning>=2.3` ``.
    """
    declared = {}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirements in project["optional-dependencies"].values():
        for text in requirements:
            requirement = Requirement(text)
            declared[canonicalize_name(requirement.name)] = str(requirement.specifier)
    quoted = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for name, specifier in re.findall(QUOTED_REQUIREMENT, page.read_text()):
            if canonicalize_name(name) in declared:
                quoted.append((page.name, name, specifier))
    assert quoted, "no requirement quoted anywhere: the pattern is wrong"
    assert [q for q in quoted if declared[canonicalize_name(q[1])] != q[2]] == []

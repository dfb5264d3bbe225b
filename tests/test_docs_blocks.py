"""Every block of README.md and docs/ that a user runs is run, or the page says why not.

Run by a test of the session that has what it needs; where the page shows what a command prints, the
command prints that (tests/docsblocks.py says how a page marks a block and what the comparison
forgives).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from docsblocks import (
    NOT_IN_THE_README_INSTALL,
    PAGES,
    ROOT,
    RUN,
    SESSION_TESTS,
    SESSIONS,
    Block,
    as_typed,
    commands_run,
    difference,
    every_block,
    read,
    run_page,
)

BLOCKS = every_block()
RUNNABLE = [block for block in BLOCKS if block.language in RUN]


def test_the_pages_have_blocks_to_run() -> None:
    assert PAGES[0].name == "README.md" and len(PAGES) > 10
    assert len(RUNNABLE) > 50, "the pages' blocks are no longer found: the reader is wrong"


def test_every_block_names_its_language() -> None:
    """A block without one (a bare fence) could hold commands that nothing would run."""
    assert [block.id for block in BLOCKS if not block.language] == []


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.id)
def test_every_block_a_user_runs_is_run_or_says_why_not(block: Block) -> None:
    for marker in block.markers:
        assert not marker.startswith("not run") or block.not_run() or block.lines_not_run(), (
            f"{block.id}: a 'not run' comment the docs test cannot read: <!-- {marker} --> "
            '(accepted: <!-- not run: REASON --> or <!-- not run "TEXT", ...: REASON -->)'
        )
    reason = block.not_run()
    run_by = block.run_by()
    same_as = block.same_as()
    if reason is not None:
        assert reason, f"{block.id} is marked as not run without saying why"
    elif same_as is not None:
        other = ROOT / same_as
        assert other.is_file(), f"{block.id} says {same_as} runs its commands: no such page"
        assert SESSIONS.get(same_as, "core") == block.session, (
            f"{block.id} needs the {block.session} session; {same_as} is run by another"
        )
        commands = block.commands()
        assert block.language != "python" and all(c.shown is None for c in commands), (
            f"{block.id}: only shell commands whose output the page does not show can be left "
            f"to {same_as}"
        )
        ran = commands_run(other)
        missing = [c.text for c in commands if as_typed(c.text) not in ran]
        assert missing == [], f"{block.id}: {same_as} does not run {missing}"
    elif run_by is not None:
        test = ROOT / run_by
        assert test.is_file(), f"{block.id} says {run_by} runs it: no such file"
        assert Path(block.page).name in test.read_text(), f"{run_by} does not name {block.page}"
        folder = SESSION_TESTS[block.session]
        assert run_by.startswith(f"{folder}/"), (
            f"{block.id} needs the {block.session} session, whose tests are in {folder}/"
        )
    else:
        assert block.session == "core", (
            f"{block.id} needs the {block.session} session: name the test of "
            f"{SESSION_TESTS[block.session]}/ that runs it "
            "(<!-- tests/... runs the next block -->), or mark it as not run, saying why"
        )
    commands = [command.text for command in block.commands(every=True)]
    for text, why in block.lines_not_run().items():
        assert why, f"{block.id}: the commands with {text!r} are not run, without saying why"
        assert any(text in command for command in commands), (
            f"{block.id}: no command has {text!r}, which the page says is not run"
        )


def test_the_readme_environment_is_what_the_readme_installs() -> None:
    """The docs' commands run without what the README's install line leaves out."""
    block = read(ROOT / "README.md")[0]
    assert block.run_by() == "tests/test_readme_commands.py"
    for name in NOT_IN_THE_README_INSTALL:
        assert name.replace("_", "-") not in block.text and name not in block.text


# -- the comparison ------------------------------------------------------------------------------


def test_shown_output_is_compared_line_by_line() -> None:
    printed = "NAME  AVAILABLE\nprivateuse1 (openreg)  yes\n"
    assert difference(["NAME  AVAILABLE", "privateuse1 (openreg)  yes"], printed) is None
    diff = difference(["NAME  AVAILABLE", "openreg  yes"], printed)
    assert diff is not None
    assert "-openreg  yes" in diff and "+privateuse1 (openreg)  yes" in diff


def test_a_line_of_dots_is_any_lines_and_trailing_dots_any_end() -> None:
    printed = "head\none\ntwo\nSKIP  5 checks: not detected here: no driver\ntail\n"
    assert (
        difference(["head", "...", "SKIP  5 checks: not detected here: ...", "tail"], printed)
        is None
    )
    assert difference(["head", "...", "tail"], "head\ntail\n") is None
    assert difference(["head", "...", "SKIP  4 checks: ...", "tail"], printed) is not None


def test_durations_vary_and_counts_do_not() -> None:
    assert difference(["13 passed, 6 skipped in 1.20s"], "13 passed, 6 skipped in 14.02s") is None
    assert difference(["12 passed, 5 skipped in 1.20s"], "13 passed, 6 skipped in 1.20s")


def test_a_text_block_after_a_command_is_its_output(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\necho one\necho two   # a comment\n```\n\n```text\ntwo\n```\n\n"
        "<!-- not run: needs a GPU -->\n```console\n$ nvidia-smi\nGPU 0\n```\n"
        'Prose.\n\n```text\nnot an output\n```\n<!-- not run "--watch": serves until stopped -->\n'
        "```bash\naccelctl env\naccelctl stats --watch 2\n```\n"
    )
    first, _, gpu, prose, watch = read_any(page)
    assert [(c.text, c.shown) for c in first.commands()] == [
        ("echo one", None),
        ("echo two   # a comment", ["two"]),
    ]
    assert gpu.not_run() == "needs a GPU" and not gpu.runs_here()
    assert [(c.text, c.shown) for c in gpu.commands()] == [("nvidia-smi", ["GPU 0"])]
    assert prose.language == "text"
    assert [c.text for c in watch.commands()] == ["accelctl env"]
    assert watch.lines_not_run() == {"--watch": "serves until stopped"} and watch.runs_here()


def test_a_block_whose_commands_another_page_runs_is_not_run_again(tmp_path: Path) -> None:
    (tmp_path / "first.md").write_text(
        "```bash\naccelctl launch --cpu --devices 2 run.py --epochs 3   # two processes\n```\n"
    )
    (tmp_path / "second.md").write_text(
        "<!-- first.md runs the same command -->\n"
        "```console\n$ accelctl  launch --cpu --devices 2 run.py --epochs 3\n```\n"
        "<!-- first.md runs the same command -->\n"
        "```console\n$ accelctl launch --cpu --devices 2 run.py --epochs 5\n```\n"
    )
    same, other = read_any(tmp_path / "second.md")
    assert same.same_as() == "first.md" and not same.runs_here()
    ran = commands_run_any(tmp_path / "first.md")
    assert ran == {"accelctl launch --cpu --devices 2 run.py --epochs 3"}
    assert [as_typed(c.text) in ran for c in same.commands() + other.commands()] == [True, False]


def commands_run_any(page: Path) -> set[str]:
    """:func:`docsblocks.commands_run` on a page outside the checkout."""
    with pages_under(page.parent):
        return commands_run(page)


def read_any(page: Path) -> list[Block]:
    """:func:`docsblocks.read` on a page outside the checkout."""
    with pages_under(page.parent):
        return read(page)


@contextlib.contextmanager
def pages_under(root: Path) -> Iterator[None]:
    """:mod:`docsblocks` reading pages under ``root`` instead of the checkout."""
    import docsblocks

    original = docsblocks.ROOT
    docsblocks.ROOT = root
    try:
        yield
    finally:
        docsblocks.ROOT = original


# -- the pages' blocks, run ----------------------------------------------------------------------

CORE_PAGES = sorted({b.page for b in RUNNABLE if b.session == "core" and b.runs_here()})


class _Page:
    """One page's blocks, run: a class per page, so that workers run the pages side by side.

    The workers take a module or a class at a time (``--dist loadscope``).
    """

    page: str

    @pytest.mark.slow
    def test_the_pages_blocks_run_and_print_what_the_page_shows(self, tmp_path: Path) -> None:
        problems = run_page(self.page, tmp_path)
        assert not problems, "\n\n".join(problems)


for _page in CORE_PAGES:  # TestReadmeMd, TestDocsTrainingMd, ...
    _name = "Test" + "".join(word.title() for word in re.split(r"[^A-Za-z0-9]+", _page))
    globals()[_name] = type(_name, (_Page,), {"page": _page, "__doc__": f"{_page}, run."})


# -- links between the pages ---------------------------------------------------------------------

_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)(?:#[^)\s]*)?\)")


def test_every_relative_link_of_the_pages_reaches_a_file() -> None:
    """Every relative link of the pages reaches a file.

    The contract links each rule's reason in docs/design/, and the pages link each other: a moved or
    renamed page breaks them silently.
    """
    broken = [
        f"{page.relative_to(ROOT).as_posix()}: {target}"
        for page in PAGES
        for target in _LINK.findall(page.read_text())
        if not (page.parent / target).exists()
    ]
    assert broken == []


def test_the_design_index_lists_every_record() -> None:
    """A decision record nobody can find from docs/design/index.md is not read."""
    design = ROOT / "docs" / "design"
    listed = set(_LINK.findall((design / "index.md").read_text()))
    records = {path.name for path in design.glob("*.md")} - {"index.md"}
    assert records, "no design records found: the path is wrong"
    assert sorted(records - listed) == []


def test_a_test_count_on_a_page_is_printed_by_a_command_run_here() -> None:
    """A test count on a page is printed by a command run here, never written in prose.

    A count of tests ("13 passed") in prose or in a block nothing runs is out of date with the next
    test added: the pages say where to read it instead.
    """
    stale = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for block in read(page):
            if block.runs_here():
                end = block.line + len(block.text.splitlines()) + 1
                lines[block.line - 1 : end] = [""] * (end - block.line + 1)
        relative = page.relative_to(ROOT).as_posix()
        stale += [
            f"{relative}:{number}: {line.strip()}"
            for number, line in enumerate(lines, 1)
            if re.search(r"\b\d[\d,]* (?:passed|skipped)\b", line)
        ]
    assert stale == [], "test counts no test keeps true:\n" + "\n".join(stale)

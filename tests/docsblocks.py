"""The fenced blocks of README.md and docs/ that a user runs, read and run as the docs tests do.

tests/test_docs_blocks.py runs them.

A page's ```` ```console ````, ```` ```bash ```` and ```` ```python ```` blocks are run, in the
page's order, in one working folder of their own (the page's commands build on each other: a plugin
generated, then installed, then validated), by the test session that has what they need
(:data:`SESSIONS`). A block is left out only by a comment on the line right above it, which must
say why:

- ``<!-- not run: REASON -->``: the whole block (it needs a GPU, a Mac, a cluster; it is an
  excerpt of a class, not a program);
- ``<!-- not run "TEXT", "TEXT": REASON -->``: the block's commands that contain one of the texts
  (each text must match a command);
- ``<!-- tests/PATH.py runs the next block ... -->`` (or ``checks``): a test of its own runs it,
  with what it needs (a framework, a real out-of-tree backend); that file must name the page;
- ``<!-- PAGE.md runs the same command ... -->``: another page of the same session runs each of
  the block's commands as written (its comments aside), so running them again would check nothing
  more.

Printed output is compared where the page shows it: the lines after a ``$ command`` of a
``console`` block, or a ```` ```text ```` block right after a ``bash`` or ``python`` block (the
output of its last command). What legitimately varies is normalised on both sides, and only that:
durations (``4.21s``, ``12.3 s``) read ``<duration>``; a line ``...`` stands for any lines, and a
line ending in `` ...`` for any line that starts with what comes before. Everything else,
names, counts and commands, must be as printed, so a drift is a diff.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The pages a user reads: the README and every page of docs/ (design notes included, so that a
#: runnable block put there is not silently left out).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: The test session whose environment has what a page's blocks need; pages not named: ``core``.
#: A block of a framework's page is run by a test of that session (a ``tests/<folder>/...``
#: marker), or marked as not run.
SESSIONS = {
    "docs/lightning.md": "lightning",
    "docs/accelerate.md": "hf",
    "docs/transformers.md": "hf",
    "docs/ray.md": "ray",
    "docs/deepspeed.md": "deepspeed",
}
#: Where each session's tests live (noxfile.py).
SESSION_TESTS = {
    "core": "tests",
    "lightning": "tests/lightning",
    "hf": "tests/hf",
    "ray": "tests/ray",
    "deepspeed": "tests/deepspeed",
}

#: The languages whose blocks are run; others (toml, yaml, text) are read, not run.
RUN = {"console", "bash", "python"}

#: What a page's commands run with: the distributions of the test environment that the README's
#: install line does not install (the out-of-tree backend the core session installs for the
#: openreg tests, and the third-party example plugin the README says to add by hand), so that
#: ``accelctl list`` prints what it prints after the README's line. A page that needs the
#: backend leaves its blocks to the openreg tests (a ``tests/openreg/...`` marker).
NOT_IN_THE_README_INSTALL = ("torch_openreg", "accelctl_hpu")

#: How long one command may run before it is taken for a hang (a hang guard only: the longest,
#: a two-process training, takes a minute on a loaded two-core machine).
HANG_GUARD_S = 900

_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*(.*?)\s*-->$")
_NOT_RUN = re.compile(r"^not run(?P<texts>(?:\s*\"[^\"]+\",?)*)\s*:\s*(?P<reason>.*)$")
_RUN_BY = re.compile(r"^(?P<path>tests/\S+\.py) (?:runs|checks) the next (?:block|command)")
_SAME_AS = re.compile(r"^(?P<page>\S+\.md) runs the same commands?\b")
_COMMENT = re.compile(r"\s+#.*$")
_DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms)\b")


@dataclass(frozen=True)
class Command:
    """One command of a shell block, with the output the page shows for it (None: none shown)."""

    text: str
    shown: list[str] | None = None


@dataclass
class Block:
    """A fenced block of a page, with the comments right above it and the text block after it."""

    page: str  # relative to the repository's root
    line: int  # the opening fence's, from 1
    language: str
    text: str
    markers: list[str] = field(default_factory=list)
    output: list[str] | None = None  # a ```text block right after it

    @property
    def id(self) -> str:
        """``page:line``, as a test's id and in messages."""
        return f"{self.page}:{self.line}"

    @property
    def session(self) -> str:
        """The test session that runs it."""
        return SESSIONS.get(self.page, "core")

    def not_run(self) -> str | None:
        """The reason the page gives for not running the whole block, if it gives one."""
        for marker in self.markers:
            found = _NOT_RUN.match(marker)
            if found and not found.group("texts"):
                return found.group("reason").strip()
        return None

    def lines_not_run(self) -> dict[str, str]:
        """Text -> reason: the commands left out, by a text each contains."""
        left_out = {}
        for marker in self.markers:
            found = _NOT_RUN.match(marker)
            if found and found.group("texts"):
                for text in re.findall(r"\"([^\"]+)\"", found.group("texts")):
                    left_out[text] = found.group("reason").strip()
        return left_out

    def run_by(self) -> str | None:
        """The test file that runs the block, where the page names one."""
        for marker in self.markers:
            found = _RUN_BY.match(marker)
            if found:
                return found.group("path")
        return None

    def same_as(self) -> str | None:
        """Return the page whose blocks run this block's commands, where the page names one.

        Relative to the repository's root.
        """
        for marker in self.markers:
            found = _SAME_AS.match(marker)
            if found:
                return found.group("page")
        return None

    def runs_here(self) -> bool:
        """Whether the docs test of its session runs it."""
        return (
            self.language in RUN
            and self.not_run() is None
            and self.run_by() is None
            and self.same_as() is None
        )

    def commands(self, *, every: bool = False) -> list[Command]:
        """Return the commands of a shell block in order, each with the output shown for it.

        The commands the page leaves out are not among them (``every``: they are).
        """
        commands: list[Command] = []
        if self.language == "console":
            for line in self.text.splitlines():
                if line.startswith("$ "):
                    commands.append(Command(line[2:], []))
                elif commands and not line.startswith("# "):
                    shown = commands[-1].shown
                    assert shown is not None
                    shown.append(line)
            commands = [Command(c.text, c.shown or None) for c in commands]
        else:
            commands = [
                Command(line)
                for line in self.text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")
            ]
        if self.output is not None and commands:
            commands[-1] = Command(commands[-1].text, self.output)
        left_out = {} if every else self.lines_not_run()
        return [c for c in commands if not any(text in c.text for text in left_out)]


def read(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with its markers and the text block that follows it."""
    lines = page.read_text().splitlines()
    relative = page.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    index, previous_end = 0, -1
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        while not lines[end].startswith("```"):
            end += 1
        markers = []
        above = index - 1
        while above >= 0 and (marker := _MARKER.match(lines[above])):
            markers.insert(0, marker.group(1))
            above -= 1
        block = Block(relative, index + 1, opening.group(1), "\n".join(lines[index + 1 : end]))
        block.markers = markers
        previous = blocks[-1] if blocks else None
        if (
            block.language == "text"
            and previous is not None
            and previous.language in RUN
            and all(not line.strip() for line in lines[previous_end + 1 : index])
        ):
            previous.output = block.text.splitlines()
        blocks.append(block)
        previous_end = end
        index = end + 1
    return blocks


def as_typed(command: str) -> str:
    """Return a shell command without its trailing comment, its white space collapsed.

    Two commands a user types alike are equal.
    """
    return " ".join(_COMMENT.sub("", command).split())


def commands_run(page: Path) -> set[str]:
    """The shell commands (:func:`as_typed`) that the docs test of ``page`` runs."""
    return {
        as_typed(command.text)
        for block in read(page)
        if block.runs_here() and block.language != "python"
        for command in block.commands()
    }


def every_block() -> list[Block]:
    """The blocks of every page, in page order."""
    return [block for page in PAGES for block in read(page)]


def normalise(line: str) -> str:
    """A line with what legitimately varies between runs (durations) written as a placeholder."""
    return _DURATION.sub("<duration>", line.rstrip())


def difference(shown: list[str], printed: str) -> str | None:
    """Return None where ``printed`` is what the page shows, else a unified diff.

    The page's lines against the printed ones; see the module's docstring for ``...``.
    """
    actual = [normalise(line) for line in printed.rstrip("\n").splitlines()]
    pattern = ""
    for line in (normalise(line) for line in shown):
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        elif line.endswith(" ..."):
            pattern += re.escape(line[:-4]) + r"[^\n]*\n"
        else:
            pattern += re.escape(line) + r"\n"
    if re.fullmatch(pattern, "".join(f"{line}\n" for line in actual)):
        return None
    return "\n".join(difflib.unified_diff(shown, actual, "the page", "printed", lineterm="", n=2))


class Workspace:
    """A user's machine as a page's commands find it: a virtual environment and a working folder.

    The environment has what the README's install line installs (this environment's packages, as
    links, less :data:`NOT_IN_THE_README_INSTALL`); the working folder holds the clone's folders.
    """

    def __init__(self, folder: Path) -> None:
        self.venv = folder / "venv"
        self.cwd = folder / "work"
        self.cwd.mkdir(parents=True)
        venv.EnvBuilder(symlinks=True, with_pip=False).create(self.venv)
        here = Path(sys.prefix)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        site = self.venv / "lib" / version / "site-packages"
        for entry in (here / "lib" / version / "site-packages").iterdir():
            name = entry.name.lower().removeprefix("__editable__").lstrip("._")
            if not name.startswith(NOT_IN_THE_README_INSTALL):
                (site / entry.name).symlink_to(entry)
        # The console scripts, started by this venv's interpreter.
        shebang = f"#!{here / 'bin' / 'python'}"
        for script in (here / "bin").iterdir():
            target = self.venv / "bin" / script.name
            if target.exists() or not script.is_file():
                continue
            with script.open("rb") as handle:
                if not handle.readline().rstrip().decode(errors="replace") == shebang:
                    continue
            text = script.read_text().split("\n", 1)[1]
            target.write_text(f"#!{self.venv / 'bin' / 'python'}\n{text}")
            target.chmod(0o755)
        # The clone's folders, so that `python examples/cv_example.py` runs from here; what the
        # commands write lands here, not in the checkout.
        for name in ("examples", "plugins", "core", "bench"):
            (self.cwd / name).symlink_to(ROOT / name)

    def environment(self) -> dict[str, str]:
        """Return the variables a user's shell has.

        This venv activated, no choice of accelctl's or of a launcher's, torch's backend autoload as
        torch sets it, pip offline.
        """
        environ = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("ACCELCTL_", "PYTEST_", "SLURM_", "TORCHELASTIC_"))
            and key not in {"PYTHONPATH", "VIRTUAL_ENV", "TORCH_DEVICE_BACKEND_AUTOLOAD", "RANK",
                            "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
        }  # fmt: skip
        # The tests' hang guard for a plugin's hooks (conftest.py): a loaded machine is not a
        # hung plugin.
        if "ACCELCTL_HOOK_TIMEOUT" in os.environ:
            environ["ACCELCTL_HOOK_TIMEOUT"] = os.environ["ACCELCTL_HOOK_TIMEOUT"]
        path = [
            p
            for p in environ.get("PATH", "").split(os.pathsep)
            if Path(p) != Path(sys.prefix, "bin")
        ]
        environ["PATH"] = os.pathsep.join([str(self.venv / "bin"), *path])
        environ["VIRTUAL_ENV"] = str(self.venv)
        # No index here: pip builds with this environment's setuptools and finds every
        # requirement installed (`pip install -e` of a generated plugin).
        environ.update(
            PIP_NO_INDEX="1",
            PIP_NO_BUILD_ISOLATION="0",
            PIP_NO_CACHE_DIR="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            MPLCONFIGDIR=str(self.cwd.parent / "mpl"),
        )
        return environ

    def run(self, command: str, *, code: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a shell command, or Python ``code``, in the working folder.

        The command through ``bash -c``; ``code`` on the stdin of ``python -``.
        """
        argv = ["python", "-"] if code is not None else ["bash", "-c", command]
        return subprocess.run(
            argv,
            input=code,
            cwd=self.cwd,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            check=False,
        )


def run_page(page: str, folder: Path) -> list[str]:
    """Run the page's blocks that its session runs, in order, in one workspace; return the problems.

    One problem per failed command or drifted output, each naming the block.
    """
    workspace = Workspace(folder)
    problems: list[str] = []
    for block in read(ROOT / page):
        if not block.runs_here():
            continue
        if block.language == "python":
            steps = [(Command("python", block.output), block.text)]
        else:
            steps = [(command, None) for command in block.commands()]
        for command, code in steps:
            done = workspace.run(command.text, code=code)
            what = f"{block.id}: `{command.text}`"
            if done.returncode != 0:
                problems.append(
                    f"{what} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
                    f"\n--- stderr\n{done.stderr[-3000:]}"
                )
                break
            if command.shown is not None:
                diff = difference(command.shown, done.stdout)
                if diff is not None:
                    problems.append(f"{what} printed other than the page shows:\n{diff}")
    shutil.rmtree(folder, ignore_errors=True)
    return problems

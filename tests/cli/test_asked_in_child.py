"""``list``, ``stats``, ``env``, ``resolve`` and ``validate`` ask the plugins in a child process.

What a plugin does to a whole process (end it, crash it, write on its descriptor 1) is its row
(``accelctl.cli._child``), and nothing in the command's own process is replaced.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cliharness import Cli, strict_json

import accelctl
from accelctl.cli import _child

from fakedists import FakeSite

#: The longest a test here waits for a child that should answer in well under a second.
HANG_GUARD_S = 120

EXIT_7 = (
    "the process accelctl asked it in ended with exit status {code} (os._exit, or an exit from "
    "native code); accelctl asked the others again without it"
)


def test_a_crash_in_native_code_is_its_row_and_list_ends(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-crash", {"crash": "fakeplugins.hostile:DetectCrashes"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    done = cli.process("list", "--json", path=fake_site.path)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in strict_json(done.stdout)}
    assert rows["good"]["available"] is True
    assert rows["crash"]["state"] == "broken"
    assert rows["crash"]["error"] == (
        "accelerator 'crash' (acme-crash 1.0): the process accelctl asked it in was killed by "
        "SIGSEGV (a crash in native code?); accelctl asked the others again without it"
    )


def test_writes_on_descriptor_one_go_to_stderr(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-loud", {"loud": "fakeplugins.hostile:DetectWritesToDescriptorOne"})
    for args in (("list", "--json"), ("resolve", "--accelerator", "loud", "--json")):
        done = cli.process(*args, path=fake_site.path)
        assert done.returncode == 0, done.stderr
        strict_json(done.stdout)  # one document, nothing else
        assert "vendor runtime 1.2 ready" in done.stderr


def test_plugins_ending_the_process_at_once_are_each_named(cli: Cli, fake_site: FakeSite) -> None:
    # Two plugins asked at once end the process: which one cannot be told, so the next process
    # asks one at a time, and each is named with its own exit.
    for name in ("first", "second"):
        fake_site.install(f"acme-{name}", {name: "fakeplugins.hostile:DetectWaitsThenCallsOsExit"})
    fake_site.install("acme-quitter", {"quitter": "fakeplugins.hostile:DetectCallsOsExit"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    done = cli.process("list", "--json", path=fake_site.path)
    rows = {row["name"]: row for row in strict_json(done.stdout)}
    assert rows["good"]["available"] is True
    for name, code in (("first", 9), ("second", 9), ("quitter", 7)):
        assert rows[name]["state"] == "broken"
        assert rows[name]["error"] == (
            f"accelerator {name!r} (acme-{name} 1.0): {EXIT_7.format(code=code)}"
        )


def test_an_exit_at_import_names_the_plugin(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install(
        "acme-gone",
        {"gone": "gone_at_import:Gone"},
        modules={"gone_at_import": "import os\nos._exit(3)\n"},
    )
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    done = cli.process("list", "--json", path=fake_site.path)
    rows = {row["name"]: row for row in strict_json(done.stdout)}
    assert rows["good"]["available"] is True
    assert rows["gone"]["error"] == f"accelerator 'gone' (acme-gone 1.0): {EXIT_7.format(code=3)}"


def test_a_named_plugin_that_ends_the_process_is_the_commands_error(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install("acme-quitter", {"quitter": "fakeplugins.hostile:DetectCallsOsExit"})
    result = cli.process("resolve", "--accelerator", "quitter", "--json", path=fake_site.path)
    assert result.returncode == 1
    expected = f"accelerator 'quitter' (acme-quitter 1.0): {EXIT_7.format(code=7)}"
    assert strict_json(result.stdout) == {"error": expected, "error_type": "PluginHookError"}
    assert result.stderr.splitlines()[-1] == f"error: {expected}"
    # every available accelerator; the quitter is a reading
    stats = cli.process("stats", "--json", path=fake_site.path)
    readings = {reading["accelerator"]: reading for reading in strict_json(stats.stdout)}
    assert stats.returncode == 1 and readings["quitter"]["error"] == expected
    env = cli.process("env", "--json", path=fake_site.path)
    [row] = [r for r in strict_json(env.stdout)["accelerators"] if r["name"] == "quitter"]
    assert env.returncode == 0 and row["error"] == expected


def in_fresh_interpreter(code: str) -> None:
    """Run ``code`` (asserts, ending with ``print("ok")``) in a fresh, single-threaded interpreter.

    One thread, as the ``accelctl`` command has where it forks (the test runner has others).
    """
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


def test_an_error_the_task_raises_keeps_its_type_and_the_childs_traceback() -> None:
    in_fresh_interpreter(
        "import os, accelctl\n"
        "from accelctl.cli import _child\n"
        "def task():\n"
        "    raise accelctl.DeviceSpecError('bad spec', accelerator='npu', spec=str(os.getpid()))\n"
        "    yield\n"
        "try:\n"
        "    list(_child.run_in_child(task))\n"
        "except accelctl.DeviceSpecError as exc:\n"
        "    assert (str(exc), exc.accelerator) == ('bad spec', 'npu')\n"
        "    assert exc.spec != str(os.getpid())  # raised in the child\n"
        "    [note] = exc.__notes__\n"
        "    assert note.startswith('in the process that asked the plugins:\\nTraceback'), note\n"
        "    print('ok')\n"
    )


def test_the_commands_own_process_replaces_nothing_process_wide() -> None:
    # os._exit and sys.stdout are replaced only in the child that asks the plugins, right after
    # the fork: no other module of accelctl assigns either.
    root = Path(accelctl.__file__).parent
    pattern = re.compile(r"^\s*(os\._exit|sys\.stdout|sys\.stderr)\s*=", re.MULTILINE)
    assigning = {
        str(path.relative_to(root)): pattern.findall(path.read_text())
        for path in root.rglob("*.py")
        if pattern.search(path.read_text())
    }
    assert assigning == {os.path.join("cli", "_child.py"): ["sys.stdout"]}
    text = (root / "cli" / "_child.py").read_text()
    child = text[text.index("def _child(") : text.index("def _portable(")]
    assert "sys.stdout = sys.stderr = _Forward(pipe)" in child  # in the child alone


def test_without_fork_the_task_runs_in_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_child, "FORK", False)
    assert list(_child.run_in_child(lambda: iter([os.getpid()]))) == [os.getpid()]
    in_fresh_interpreter(
        "import os\n"
        "from accelctl.cli import _child\n"
        "[pid] = _child.run_in_child(lambda: iter([os.getpid()]))\n"
        "assert pid != os.getpid() and _child.asked_in_child\n"
        "print('ok')\n"
    )


def test_a_process_with_other_threads_runs_the_task_itself() -> None:
    # A fork copies the locks the other threads hold, never released in the child: a command
    # run inside a program with threads asks its plugins in that program's process.
    in_fresh_interpreter(
        "import os, threading\n"
        "from accelctl.cli import _child\n"
        "stop = threading.Event()\n"
        "other = threading.Thread(target=stop.wait)\n"
        "other.start()\n"
        "[pid] = _child.run_in_child(lambda: iter([os.getpid()]))\n"
        "assert pid == os.getpid() and not _child.asked_in_child\n"
        "stop.set()\n"
        "print('ok')\n"
    )


def test_plain_results_travel_without_pickle_and_others_with_it() -> None:
    """``list``'s plain rows cross the pipe by marshal, anything else by pickle, and arrive equal.

    The command then never imports pickle for its rows; what marshal refuses (a dataclass, an error)
    goes through pickle; tuples arrive as tuples.
    """
    import dataclasses

    import accelctl

    rows = ("result", [({"name": "cpu", "count": 1, "ok": True, "why": None}, ("cpu", 1.5), None)])
    plain = _child._dumps(rows)
    assert plain[:1] == b"m" and _child._loads(plain) == rows
    info = accelctl.AcceleratorInfo(description="x", priority=3, aliases=("a",))
    other = _child._dumps(("result", info))
    assert other[:1] == b"p" and _child._loads(other) == ("result", info)
    assert dataclasses.is_dataclass(_child._loads(other)[1])
    in_fresh_interpreter(  # through a real child
        "import os\n"
        "from accelctl.cli import _child\n"
        f"rows = {rows[1]!r}\n"
        "[got] = _child.run_in_child(lambda: iter([(os.getpid(), rows)]))\n"
        "assert got[0] != os.getpid() and got[1] == rows, got\n"
        "print('ok')\n"
    )


def test_what_the_child_prints_reaches_the_commands_stderr(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-chatty", {"chatty": "fakeplugins.chatty:ChattyAccelerator"})
    done = cli.process("list", "--json", path=fake_site.path)
    assert done.returncode == 0, done.stderr
    assert {row["name"] for row in json.loads(done.stdout)} >= {"chatty"}
    assert "hello from import" in done.stderr and "hello from detect" in done.stderr


def test_a_command_asked_in_a_child_skips_the_shutdowns_collection() -> None:
    """A command that asked in a child freezes the collector's objects; others leave them.

    Once ``list`` asked its plugins in a child, ``main`` freezes the collector's objects, so the
    interpreter's shutdown does not walk them; ``--no-detect`` (no plugin code) leaves the collector
    as it was. Both still exit through ``SystemExit`` and run ``atexit`` handlers.
    """
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
        "from accelctl.cli import main\n"
        "main()\n"
    )
    counts = {}
    for args in (["list", "--json"], ["list", "--no-detect", "--json"]):
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
            timeout=300,
        )  # fmt: skip
        assert json.loads(done.stdout)  # the output is whole
        counts[args[1]] = int(done.stderr.split("frozen ")[-1].split()[0])
    assert counts["--json"] > 1000 and counts["--no-detect"] == 0

"""``list``, ``stats``, ``env``, ``resolve`` and ``validate`` ask the plugins in a process of their
own (``accelctl.cli._apart``): what a plugin does to a whole process (end it, crash it, write on
its descriptor 1) is its row, and nothing in the command's own process is replaced."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cliharness import Cli, strict_json

import accelctl
from accelctl.cli import _apart

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
    rows = {row["name"]: row for row in cli.json("list")}
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
    rows = {row["name"]: row for row in cli.json("list")}
    assert rows["good"]["available"] is True
    assert rows["gone"]["error"] == f"accelerator 'gone' (acme-gone 1.0): {EXIT_7.format(code=3)}"


def test_a_named_plugin_that_ends_the_process_is_the_commands_error(
    cli: Cli, fake_site: FakeSite
) -> None:
    fake_site.install("acme-quitter", {"quitter": "fakeplugins.hostile:DetectCallsOsExit"})
    result = cli("resolve", "--accelerator", "quitter", "--json")
    assert result.exit_code == 1
    expected = f"accelerator 'quitter' (acme-quitter 1.0): {EXIT_7.format(code=7)}"
    assert strict_json(result.stdout) == {"error": expected, "error_type": "PluginHookError"}
    assert result.stderr.splitlines()[-1] == f"error: {expected}"
    stats = cli("stats", "--json")  # every available accelerator; the quitter is a reading
    readings = {reading["accelerator"]: reading for reading in strict_json(stats.stdout)}
    assert stats.exit_code == 1 and readings["quitter"]["error"] == expected
    env = cli("env", "--json")
    [row] = [r for r in strict_json(env.stdout)["accelerators"] if r["name"] == "quitter"]
    assert env.exit_code == 0 and row["error"] == expected


def test_an_error_the_task_raises_keeps_its_type_and_the_childs_traceback() -> None:
    def task():
        raise accelctl.DeviceSpecError("bad spec", accelerator="npu", spec="x")
        yield  # a generator

    with pytest.raises(accelctl.DeviceSpecError) as caught:
        list(_apart.run_apart(task))
    assert (str(caught.value), caught.value.accelerator, caught.value.spec) == (
        "bad spec",
        "npu",
        "x",
    )
    [note] = caught.value.__notes__
    assert note.startswith("in the process that asked the plugins:\nTraceback")


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
    assert assigning == {os.path.join("cli", "_apart.py"): ["sys.stdout"]}
    text = (root / "cli" / "_apart.py").read_text()
    child = text[text.index("def _child(") : text.index("def _portable(")]
    assert "sys.stdout = sys.stderr = _Forward(pipe)" in child  # in the child alone


def test_without_fork_the_task_runs_in_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_apart, "FORK", False)
    assert list(_apart.run_apart(lambda: iter([os.getpid()]))) == [os.getpid()]
    monkeypatch.setattr(_apart, "FORK", True)
    [pid] = _apart.run_apart(lambda: iter([os.getpid()]))
    assert pid != os.getpid()


def test_plain_results_travel_without_pickle_and_others_with_it() -> None:
    """Issue 48: ``list``'s rows (plain data) cross the pipe through marshal, so that the
    command never imports pickle; anything marshal refuses (a dataclass, an error) through
    pickle; both arrive equal, tuples as tuples."""
    import dataclasses

    import accelctl

    rows = ("result", [({"name": "cpu", "count": 1, "ok": True, "why": None}, ("cpu", 1.5), None)])
    plain = _apart._dumps(rows)
    assert plain[:1] == b"m" and _apart._loads(plain) == rows
    info = accelctl.AcceleratorInfo(description="x", priority=3, aliases=("a",))
    other = _apart._dumps(("result", info))
    assert other[:1] == b"p" and _apart._loads(other) == ("result", info)
    assert dataclasses.is_dataclass(_apart._loads(other)[1])
    [got] = _apart.run_apart(lambda: iter([rows[1]]))  # through a real child
    assert got == rows[1]


def test_what_the_child_prints_reaches_the_commands_stderr(cli: Cli, fake_site: FakeSite) -> None:
    fake_site.install("acme-chatty", {"chatty": "fakeplugins.chatty:ChattyAccelerator"})
    result = cli("list", "--json")
    assert result.exit_code == 0
    assert {row["name"] for row in json.loads(result.stdout)} >= {"chatty"}
    assert "hello from import" in result.stderr and "hello from detect" in result.stderr


def test_a_module_a_thread_of_the_parent_is_importing_can_be_imported_in_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A late plugin's thread left inside an import holds that module's lock when the command
    # forks; the child, where that thread does not exist, must not wait for it.
    import importlib
    import sys
    import threading

    gate = threading.Event()
    monkeypatch.setattr(_apart, "_test_gate", gate, raising=False)
    (tmp_path / "slow_to_import.py").write_text(
        "from accelctl.cli import _apart\n_apart._test_gate.wait(60)\nVALUE = 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importing = threading.Thread(target=importlib.import_module, args=("slow_to_import",))
    importing.start()
    try:
        while "slow_to_import" not in sys.modules:  # the thread is inside the import
            threading.Event().wait(0.01)

        def task():
            import slow_to_import  # noqa: F401  half-imported in the parent: no wait here

            yield "imported"

        def hung(signum: int, frame: object) -> None:
            raise TimeoutError("the child waited for the parent's import lock")

        # A hang guard (the child takes well under a second): where the child waits for the
        # lock, it would wait for ever.
        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(HANG_GUARD_S)
        try:
            assert list(_apart.run_apart(task)) == ["imported"]
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    finally:
        gate.set()
        importing.join()
        sys.modules.pop("slow_to_import", None)


def test_a_command_asked_apart_skips_the_shutdowns_collection() -> None:
    """Issue 48: once ``list`` asked its plugins in a child, ``main`` freezes the collector's
    objects, so the interpreter's shutdown does not walk them; a command that asked nothing
    apart (``--no-detect``: no plugin code) leaves the collector as it was. Both still exit
    through ``SystemExit`` and run ``atexit`` handlers."""
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

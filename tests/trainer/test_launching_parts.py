"""The launcher's parts on their own: the node options checked once, torchrun's command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelctl._contract.errors import LaunchError
from accelctl._launching.options import NodeOptionError, Nodes, check_nodes
from accelctl._launching.scripts import torchrun_argv
from accelctl.cli.main import cli
from accelctl.launcher import launch_script

BAD_NODES = [
    # (nnodes, node_rank, master_addr), the option at fault, the whole sentence
    (
        (2, 2, "h"),
        "--node-rank",
        "--node-rank 2 is not below --nnodes 2 (machines are numbered 0 to 1)",
    ),
    (
        (2, 0, None),
        None,
        "--nnodes 2 needs --master-addr: the address of the machine started with --node-rank 0, "
        "the same on every machine",
    ),
]


@pytest.mark.parametrize(("nodes", "option", "sentence"), BAD_NODES)
def test_launch_script_and_the_cli_refuse_node_options_in_the_same_words(
    tmp_path: Path, nodes: tuple[int, int, str | None], option: str | None, sentence: str
) -> None:
    nnodes, node_rank, master_addr = nodes
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('must not run')\n")
    with pytest.raises(NodeOptionError) as caught:  # before any selection is made
        launch_script(str(script), nnodes=nnodes, node_rank=node_rank, master_addr=master_addr)
    assert str(caught.value) == sentence and caught.value.option == option
    assert isinstance(caught.value, LaunchError)

    args = ["--nnodes", str(nnodes), "--node-rank", str(node_rank)]
    args += ["--master-addr", master_addr] if master_addr else []
    result = CliRunner().invoke(cli, ["launch", *args, str(script)])
    assert result.exit_code == 2
    assert caught.value.problem in " ".join(result.stderr.split())  # click wraps long lines
    if option is not None:
        assert f"Invalid value for {option}: " in result.stderr


@pytest.mark.parametrize(
    ("nodes", "sentence"),
    [
        ((0, 0, None), "--nnodes 0 is below 1: give the number of machines taking part"),
        ((2, -1, "h"), "--node-rank -1 is below 0 (machines are numbered 0 to 1)"),
    ],
)
def test_values_the_cli_range_checks_are_refused_by_the_library_too(
    nodes: tuple[int, int, str | None], sentence: str
) -> None:
    with pytest.raises(NodeOptionError, match=f"^{re.escape(sentence)}$"):
        check_nodes(*nodes)


def test_check_nodes_accepts_one_machine_without_an_address_and_several_with_one() -> None:
    check_nodes(1, 0, None)
    check_nodes(3, 2, "node0.cluster")


def test_torchrun_argv_uses_a_free_local_port_on_one_machine() -> None:
    argv = torchrun_argv(2, Nodes(), max_restarts=0)
    assert argv == ["--nproc-per-node", "2", "--nnodes", "1", "--max-restarts", "0", "--standalone"]


def test_torchrun_argv_names_the_rendezvous_when_one_is_given() -> None:
    several = torchrun_argv(4, Nodes(2, 1, "10.0.0.1"), max_restarts=3)
    assert several == [
        "--nproc-per-node", "4", "--nnodes", "2", "--max-restarts", "3",
        "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500",
    ]  # fmt: skip
    # A port alone on one machine: that port on localhost, not torchrun's standalone mode.
    port_only = torchrun_argv(1, Nodes(master_port=1234), max_restarts=0)
    assert port_only[-6:] == [
        "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", "1234",
    ]  # fmt: skip


FAILING_SCRIPT = """
import json, os, sys
from pathlib import Path
seen = os.environ["TORCHELASTIC_ERROR_FILE"]
Path(sys.argv[1]).write_text(json.dumps({"seen": seen, "exists": Path(sys.argv[2]).exists()}))
raise ValueError("the script failed")
"""


def test_a_failing_child_publishes_its_error_record_whole(tmp_path: Path) -> None:
    # The record is written beside the launcher's file and moved there whole
    # (docs/design/error-record-written-whole.md).
    import json
    import os
    import subprocess
    import sys

    script, seen, error_file = tmp_path / "fail.py", tmp_path / "seen.json", tmp_path / "e.json"
    script.write_text(FAILING_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "accelctl.launcher", str(script), str(seen), str(error_file)],
        env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)},
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: one import of torch
    )
    assert done.returncode == 1, done.stderr
    during = json.loads(seen.read_text())
    assert during["seen"] != str(error_file) and during["seen"].endswith(".partial")
    assert during["exists"] is False  # nothing at the launcher's path while the script ran
    record = json.loads(error_file.read_text())
    assert "ValueError: the script failed" in json.dumps(record)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


ENDING_SCRIPT = """
import atexit, logging, logging.handlers, os, sys, tempfile
from pathlib import Path

out = Path(sys.argv[1])


class TornDown:
    # Its __del__ runs only where the interpreter tears its objects down (os kept: by then the
    # modules' globals and the import system are gone).
    def __init__(self, path, os):
        self.path, self.os = path, os

    def __del__(self):
        self.os.close(self.os.open(self.path, self.os.O_CREAT | self.os.O_WRONLY))


# Held by sys, which lives until the teardown, not by the script's globals.
sys.kept = TornDown(str(out / "torn-down"), os)
# Exit handlers registered before the script, by what the launcher imported: logging's shutdown
# (which flushes this buffered record) and weakref.finalize's (which removes this folder).
buffered = logging.handlers.MemoryHandler(100, target=logging.FileHandler(out / "log.txt"))
logging.getLogger("ending").addHandler(buffered)
logging.getLogger("ending").warning("flushed at exit")
sys.folder = tempfile.TemporaryDirectory(dir=out)
(out / "folder.txt").write_text(sys.folder.name)
atexit.register(lambda: (out / "handled").write_text("ran"))
print("before the end", flush=False)  # still buffered when the script ends
if sys.argv[2] == "exit-3":
    sys.exit(3)
if sys.argv[2] == "message":
    sys.exit("the script's own words")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ending", "status", "stderr"),
    [("return", 0, ""), ("exit-3", 3, ""), ("message", 1, "the script's own words")],
)
def test_a_launched_scripts_exit_handlers_run_and_its_status_is_kept(
    tmp_path: Path, ending: str, status: int, stderr: str
) -> None:
    """A launched child ends without its teardown, after every exit handler, its status kept."""
    import os
    import subprocess
    import sys

    script = tmp_path / "end.py"
    script.write_text(ENDING_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the flush is ours
    done = subprocess.run(
        [sys.executable, "-m", "accelctl.launcher", str(script), str(tmp_path), ending],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard: one import of torch
    )
    assert done.returncode == status, done.stderr
    assert (tmp_path / "handled").read_text() == "ran"  # the script's own handler
    assert (tmp_path / "log.txt").read_text() == "flushed at exit\n"  # logging's, registered before
    assert not Path((tmp_path / "folder.txt").read_text()).exists()  # weakref.finalize's
    assert not (tmp_path / "torn-down").exists()  # then os._exit, before the teardown
    assert done.stdout == "before the end\n"  # flushed before os._exit
    assert done.stderr.strip() == stderr

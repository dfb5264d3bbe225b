"""The conformance kit needs no extra: ``validate`` runs without pytest; the pytest class needs it.

``accelctl validate`` and ``accelctl.testing.validate`` ship with the core; the pytest class's tests
need the extra ``accelctl[testing]``. pytest's absence is simulated in a fresh interpreter
(``sys.modules["pytest"] = None``), whatever is installed.
"""

from __future__ import annotations

import json

import pytest
from cliharness import Cli, strict_json

from accelctl.testing import CHECK_IDS

#: Run the console script with pytest unimportable, then say whether anything imported it.
WITHOUT_PYTEST = """
import sys
sys.modules["pytest"] = None  # not installed: any `import pytest` raises
from accelctl.cli import cli
try:
    cli(["validate", *sys.argv[1:]], prog_name="accelctl")
except SystemExit as exc:
    print("exit", exc.code, file=sys.stderr)
"""


@pytest.mark.slow
def test_validate_runs_without_pytest(cli: Cli) -> None:
    done = cli.process("cpu", "--json", code=WITHOUT_PYTEST, env={"ACCELCTL_PLUGINS": "cpu"})
    (report,) = strict_json(done.stdout)
    # Every check ran (the timed ones may fail on a loaded machine: not what this test is about).
    statuses = {check["check"]: check["status"] for check in report["checks"]}
    assert list(statuses) == list(CHECK_IDS)
    assert (
        statuses["loads"] == statuses["hooks_match_specs"] == statuses["required_hooks"] == "pass"
    )
    exit_line = f"exit {0 if report['passed'] else 1}"
    assert done.stderr.splitlines()[-1] == exit_line, done.stderr


@pytest.mark.slow
def test_the_kit_imports_without_pytest_and_its_class_asks_for_it_only_when_run(
    cli: Cli,
) -> None:
    code = (
        "import json, sys\n"
        "sys.modules['pytest'] = None\n"
        "import accelctl.testing as kit\n"
        "class TestMine(kit.AcceleratorConformance):\n"
        "    accelerator = 'cpu'\n"
        "    probe_import = False\n"
        "report = kit.validate('cpu', probe_import=False)\n"
        "try:\n"
        "    TestMine().test_unavailable_reason()  # a skipped check: pytest.skip\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(json.dumps({'loads': report.result('loads').status, 'missing': exc.name}))\n"
    )
    done = cli.process(code=code, env={"ACCELCTL_PLUGINS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"loads": "pass", "missing": "pytest"}

"""``accelctl stats --json`` and ``env --json`` import no torch where the plugins need none.

A machine without a GPU; checked in a fresh interpreter, as for ``list``.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch
from cliharness import Cli

PROBE = textwrap.dedent(
    """
    import sys
    from accelctl.cli import main
    sys.argv = ["accelctl"] + sys.argv[1:]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    print(f"TORCH={'torch' in sys.modules} EXIT={code}", file=sys.stderr)
    """
)

#: The in-repo plugins; MPS asks torch on macOS, where this check does not hold by design.
IN_REPO = "cpu,cuda,mps,hpu,privateuse1"


@pytest.mark.skipif(sys.platform == "darwin", reason="the MPS plugin imports torch on macOS")
@pytest.mark.parametrize("command", ["stats", "env"])
def test_imports_no_torch(cli: Cli, command: str) -> None:
    done = cli.process(command, "--json", code=PROBE, env={"ACCELCTL_PLUGINS": IN_REPO})
    stdout, stderr = done.stdout, done.stderr
    assert "TORCH=False EXIT=0" in stderr, stderr
    document = json.loads(stdout)
    if command == "stats":
        assert ("cpu", "cpu", None) in [
            (r["accelerator"], r["device"], r["error"]) for r in document
        ]
    else:
        assert document["torch"]["version"] == torch.__version__
        assert document["torch"]["cuda"] == torch.version.cuda
        assert document["torch"]["source"] == "version.py"
        assert document["torch"]["mps_built"] is False


def test_human_forms_too(cli: Cli) -> None:
    for command in ("stats", "env"):
        stderr = cli.process(command, code=PROBE, env={"ACCELCTL_PLUGINS": IN_REPO}).stderr
        if sys.platform != "darwin":
            assert "TORCH=False EXIT=0" in stderr, stderr

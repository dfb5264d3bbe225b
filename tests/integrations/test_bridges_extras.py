"""A bridge imported without its framework says which extra installs it.

The bridges are the core's own modules; their frameworks are the extras'. The framework's absence is
simulated in a fresh interpreter, so these tests do not depend on what is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A hang guard for one fresh interpreter (it imports torch: seconds, minutes when loaded).
HANG_GUARD_S = 300


#: Import a bridge in an interpreter where its framework cannot be found, as where it is not
#: installed (a finder ahead of the others says so for the framework and its modules).
NOT_INSTALLED = """
import json, sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == {framework!r} or name.startswith({framework!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
try:
    import accelctl.integrations.{bridge}
except ModuleNotFoundError as exc:
    print(json.dumps({{"name": exc.name, "message": str(exc)}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bridge", "framework", "what"),
    [
        ("lightning", "lightning", "Lightning"),
        ("accelerate", "accelerate", "HF Accelerate"),
        ("deepspeed", "deepspeed", "DeepSpeed"),
    ],
)
def test_a_bridge_without_its_framework_names_the_extra_that_installs_it(
    bridge: str, framework: str, what: str
) -> None:
    code = NOT_INSTALLED.format(framework=framework, bridge=bridge)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr
    raised = json.loads(done.stdout)
    assert raised["name"] == framework
    assert raised["message"] == (
        f"accelctl.integrations.{bridge} needs {what} ({framework} is missing): "
        f"pip install 'accelctl[{bridge}]' (in a clone of accelctl, from its folder: "
        f"pip install -e '.[{bridge}]')"
    )


def test_the_extras_carry_third_party_dependencies_only() -> None:
    # `pip install 'accelctl[lightning]'` resolves from an index (and `-e '.[lightning]'` in a
    # clone): an extra names no distribution of ours that an index may not have.
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # (Each bridge's window: tests/integrations/test_versions.py.)
    assert extras["testing"] == ["pytest>=8"]  # the kit's pytest class; the checks need none
    for extra, requirements in extras.items():
        assert not [r for r in requirements if r.startswith("accelctl")], extra

"""Every ``ACCELCTL_*`` variable is read by ``accelctl._contract.settings`` alone, listed once.

The one table is the same in the code and in docs/concepts.md section 10.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from accelctl._contract import settings as _settings

CORE = Path(_settings.__file__).parents[1]
CONCEPTS = CORE.parents[1] / "docs" / "concepts.md"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("", 10.0), ("  ", 10.0), ("2.5", 2.5), (" 30 ", 30.0), ("none", None), ("0", None)],
)
def test_hook_timeout_values(value: str, seconds: float | None) -> None:
    assert _settings.hook_timeout({"ACCELCTL_HOOK_TIMEOUT": value}) == seconds


def test_hook_timeout_default_when_unset() -> None:
    assert _settings.hook_timeout({}) == _settings.DEFAULT_HOOK_TIMEOUT_S == 10.0


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon", "1e12"])
def test_a_timeout_that_is_no_number_of_seconds_names_the_variable(value: str) -> None:
    with pytest.raises(_settings.SettingError, match=f"ACCELCTL_HOOK_TIMEOUT='{value}'"):
        _settings.hook_timeout({"ACCELCTL_HOOK_TIMEOUT": value})
    with pytest.raises(_settings.SettingError, match="ACCELCTL_COLLECTIVE_TIMEOUT"):
        _settings.collective_timeout({"ACCELCTL_COLLECTIVE_TIMEOUT": value})


def test_the_plugin_filter_reads_both_variables_case_insensitively() -> None:
    read = _settings.PluginFilter.read(
        {"ACCELCTL_PLUGINS": "CPU, cuda", "ACCELCTL_DISABLE": "Cuda"}
    )
    assert read.blocked_reason("cpu") is None
    assert read.blocked_reason("cuda") == "disabled by ACCELCTL_DISABLE"
    assert read.blocked_reason("mps") == "disabled: ACCELCTL_PLUGINS=cpu,cuda does not list it"
    assert not _settings.PluginFilter.read({}).active
    assert _settings.PluginFilter.read({"ACCELCTL_PLUGINS": ""}).blocked_reason("cpu") is not None


def test_the_docs_table_is_the_codes_table() -> None:
    section = CONCEPTS.read_text().split("## 10. Environment", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(ACCELCTL_[A-Z_]+)` \|", section, flags=re.MULTILINE)
    assert documented == list(_settings.VARIABLES)


def _names_of_variables(path: Path) -> list[str]:
    """The string constants of a module that are exactly an ``ACCELCTL_*`` variable's name."""
    tree = ast.parse(path.read_text())
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"ACCELCTL_[A-Z_]+", node.value)
    ]


def test_no_other_module_of_the_core_names_a_variable() -> None:
    offenders = {
        str(path.relative_to(CORE)): names
        for path in sorted(CORE.rglob("*.py"))
        if path != Path(_settings.__file__) and (names := _names_of_variables(path))
    }
    assert offenders == {}

"""The author guide documents every hook and every conformance check.

A meta-test: adding a hook spec or a check without its section fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from accelctl import hookspecs
from accelctl.testing import CHECK_IDS

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-plugin.md"


def _spec_names() -> list[str]:
    """Every function of accelctl.hookspecs carrying pluggy's spec marker."""
    return sorted(
        name
        for name, value in vars(hookspecs).items()
        if callable(value) and hasattr(value, "accelctl_spec")
    )


def test_the_spec_list_is_what_the_core_declares() -> None:
    assert _spec_names() == sorted(hookspecs.ALL_HOOKS)


def test_every_hook_spec_has_a_section_in_the_guide() -> None:
    headings = re.findall(r"^#{2,4} (.+)$", GUIDE.read_text(), flags=re.MULTILINE)
    missing = [
        hook for hook in _spec_names() if not any(f"`{hook}(" in heading for heading in headings)
    ]
    assert not missing, f"{GUIDE.name} has no section for the hook(s) {', '.join(missing)}"


def test_every_hook_section_says_whether_it_is_required() -> None:
    text = GUIDE.read_text()
    for hook in _spec_names():
        heading = re.search(rf"^#{{2,4}} `{hook}\(.*$", text, flags=re.MULTILINE)
        assert heading is not None
        expected = "required" if hook in hookspecs.REQUIRED_HOOKS else "optional"
        assert heading.group(0).endswith(expected), heading.group(0)


def test_every_conformance_check_is_in_the_guide_table() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \|", GUIDE.read_text(), flags=re.MULTILINE)
    missing = [check for check in CHECK_IDS if check not in rows]
    assert not missing, f"{GUIDE.name} does not describe the check(s) {', '.join(missing)}"

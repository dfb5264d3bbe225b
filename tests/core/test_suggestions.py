"""An unknown accelerator name gets "Did you mean" only for a typo, a pip command only if it exists.

The typo check is accelctl._base.typos; docs/concepts.md section 6 has the rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from accelctl import UnknownAcceleratorError
from accelctl._base.typos import nearest
from accelctl._host.registry import OTHER_CHIPS, SHIPPED
from accelctl.testing import Registry

from fakedists import FakeSite

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("asked", "names", "expected"),
    [
        # 3 letters or fewer: a letter added, dropped, or two swapped; never a changed letter
        ("cpus", ["cpu", "cuda"], "cpu"),
        ("cpuu", ["cpu"], "cpu"),
        ("pcu", ["cpu"], "cpu"),
        ("nup", ["npu", "xpu"], "npu"),
        ("hpu", ["cpu", "xpu", "gpu"], None),
        ("tpu", ["xpu"], None),
        ("npu", ["xpu", "mps"], None),
        ("mpx", ["mps"], None),
        # 4 to 7 letters: one slip of any kind
        ("cdua", ["cuda"], "cuda"),
        ("cudo", ["cuda"], "cuda"),
        ("goood", ["good"], "good"),
        ("cdau", ["cuda"], None),  # two slips
        # 8 letters or more: two slips
        ("privteuse2", ["privateuse1"], "privateuse1"),
        ("prvteuse2", ["privateuse1"], None),
        # equally near: the intent cannot be told
        ("pu", ["cpu", "hpu"], None),
        ("abc", [], None),
    ],
)
def test_a_suggestion_is_a_typo_of_one_name(
    asked: str, names: list[str], expected: str | None
) -> None:
    assert nearest(asked, names) == expected


def clone_with_the_shipped_plugins(site: FakeSite) -> Registry:
    """A fresh clone's plugins: the CPU one working, the others undetected here."""
    site.install("accelctl-cpu", {"cpu": "fakeplugins.good:GoodAccelerator"})
    for name in ("cuda", "mps", "xpu"):
        site.install(f"accelctl-{name}", {name: "fakeplugins.undetected:UndetectedAccelerator"})
    return Registry(path=site.path, environ={})


@pytest.mark.parametrize("chip", ["hpu", "tpu", "npu"])
def test_another_chip_is_never_suggested_nor_a_package_invented(
    fake_site: FakeSite, chip: str
) -> None:
    registry = clone_with_the_shipped_plugins(fake_site)
    with pytest.raises(UnknownAcceleratorError) as info:
        registry.get(chip)
    message = str(info.value)
    assert message.startswith(f"no accelerator named {chip!r} is installed")
    assert "Did you mean" not in message  # not 'xpu': another chip, one letter apart
    assert "pip install accelctl-" not in message  # no such package is known to exist
    assert f"No plugin for {chip!r} is known to accelctl" in message
    assert f"if its vendor publishes one (by convention named accelctl-{chip})" in message


def test_a_typo_of_an_uninstalled_shipped_plugin_gets_its_pip_command(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-cpu", {"cpu": "fakeplugins.good:GoodAccelerator"})
    registry = Registry(path=fake_site.path, environ={})
    with pytest.raises(UnknownAcceleratorError) as info:
        registry.get("cdua")
    assert str(info.value).endswith(
        "Did you mean 'cuda'? Install its plugin: pip install accelctl-cuda"
    )
    with pytest.raises(UnknownAcceleratorError) as info:
        registry.get("hpuu")  # a typo of a chip accelctl ships no plugin for
    assert "Did you mean 'hpu'? No plugin for 'hpu' is known to accelctl" in str(info.value)


def test_every_pip_command_names_a_plugin_this_project_ships() -> None:
    shipped = {
        tomllib.loads(path.read_text())["project"]["name"]
        for path in ROOT.glob("plugins/*/pyproject.toml")
    }
    assert set(SHIPPED.values()) <= shipped
    assert not set(OTHER_CHIPS) & set(SHIPPED)

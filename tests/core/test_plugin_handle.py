"""The handle: one object per installed entry point, made by the registry's scan, with its
identity, its state (and the stage at which loading failed) and its hooks; every consumer reads
it."""

from __future__ import annotations

import sys

import pytest

from accelctl import AcceleratorHandle, PluginConflictError, PluginLoadError
from accelctl.testing import Registry

from fakedists import FakeSite, good_plugin

NOT_INSTANTIABLE = """
    import accelctl

    class Needy(accelctl.Accelerator):
        def __init__(self, required):
            super().__init__()

        def detect(self):
            return False

        def auto_device_count(self):
            return 0
"""


def registry(site: FakeSite, environ: dict[str, str] | None = None) -> Registry:
    return Registry(path=site.path, environ=environ or {})


def test_a_handle_is_not_loaded_until_asked_then_loaded_once(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "rec_good"}, {"rec_good": good_plugin("good")}, "2.1")
    reg = registry(fake_site)
    (record,) = reg.claimants("good")
    assert isinstance(record, AcceleratorHandle)
    assert record.state == "not-loaded" and record.plugin is None
    assert (record.name, record.distribution, record.version) == ("good", "acme-good", "2.1")
    assert record.entry_point == "rec_good"
    assert "rec_good" not in sys.modules  # the scan reads metadata only
    assert record.load() is record
    assert record.state == "loaded" and record.stage is None and record.error is None
    assert reg.get("good") is record  # one object, from the scan to the hook call
    assert reg.listing()[0].accelerator is record


@pytest.mark.parametrize(
    ("modules", "value", "stage", "message"),
    [
        ({"rec_boom": "raise RuntimeError('no driver')"}, "rec_boom", "import", "no driver"),
        ({"rec_needy": NOT_INSTANTIABLE}, "rec_needy:Needy", "instantiate", "no arguments"),
        (
            {"rec_typo": good_plugin("bad").replace("def detect", "def detcet")},
            "rec_typo",
            "register",
            "detcet",
        ),
    ],
)
def test_each_load_failure_records_its_stage(
    fake_site: FakeSite, modules: dict[str, str], value: str, stage: str, message: str
) -> None:
    fake_site.install("acme-bad", {"bad": value}, modules)
    reg = registry(fake_site)
    (record,) = reg.claimants("bad")
    record.load()
    assert record.state == "broken" and record.stage == stage
    assert isinstance(record.error, PluginLoadError) and message in str(record.error)
    with pytest.raises(PluginLoadError, match=message):  # get() raises what the record says
        reg.get("bad")
    assert reg.listing()[0].error == " ".join(str(record.error).split())


def test_a_plugin_refused_at_register_keeps_its_object(fake_site: FakeSite) -> None:
    source = good_plugin("bad").replace("def detect", "def detcet")
    fake_site.install("acme-bad", {"bad": "rec_kept"}, {"rec_kept": source})
    (record,) = registry(fake_site).claimants("bad")
    assert record.load().stage == "register"
    assert record.plugin is sys.modules["rec_kept"]  # for the checks to diagnose its hooks


def test_an_invalid_name_is_stage_name_and_nothing_is_imported(fake_site: FakeSite) -> None:
    fake_site.install("oddly", {"gpu": "rec_odd"}, {"rec_odd": good_plugin("odd")})
    (record,) = registry(fake_site).claimants("gpu")
    assert (record.load().state, record.stage) == ("broken", "name")
    assert "is reserved" in str(record.error) and "rec_odd" not in sys.modules


def test_unreadable_metadata_is_stage_metadata_without_loading(fake_site: FakeSite) -> None:
    fake_site.install_raw(
        "acme-meta",
        {"entry_points.txt": "[accelctl.accelerators]\nmeta = rec_meta\nno-equals-sign\n"},
        {"rec_meta": good_plugin("meta")},
    )
    reg = registry(fake_site)
    rows = reg.listing(detect=False)  # --no-detect settles it: no plugin code needed
    (record,) = reg.claimants("meta")
    assert (record.state, record.stage) == ("broken", "metadata")
    assert rows[0].state == "broken" and "cannot read the entry points" in (rows[0].error or "")
    assert "rec_meta" not in sys.modules


def test_two_distributions_claiming_one_name_are_two_handles_both_in_conflict(
    fake_site: FakeSite,
) -> None:
    fake_site.install("vendor-a", {"npu": "rec_npu_a"}, {"rec_npu_a": good_plugin("npu")})
    fake_site.install("vendor-b", {"npu": "rec_npu_b"}, {"rec_npu_b": good_plugin("npu")})
    reg = registry(fake_site)
    records = reg.claimants("npu")
    assert [r.distribution for r in records] == ["vendor-a", "vendor-b"]
    # Known from the metadata alone: --no-detect shows both rows broken.
    assert [row.state for row in reg.listing(detect=False)] == ["broken", "broken"]
    with pytest.raises(PluginConflictError, match="vendor-a and vendor-b"):
        reg.get("npu")
    assert all(r.state == "broken" and r.stage == "conflict" for r in records)
    assert all(isinstance(r.error, PluginConflictError) for r in records)
    assert "rec_npu_a" not in sys.modules and "rec_npu_b" not in sys.modules


def test_one_handle_per_entry_point(fake_site: FakeSite) -> None:
    fake_site.install(
        "acme-two",
        {"one": "rec_one", "two": "rec_two"},
        {"rec_one": good_plugin("one"), "rec_two": good_plugin("two")},
    )
    reg = registry(fake_site)
    assert [(r.name, r.distribution) for r in reg.plugins()] == [
        ("one", "acme-two"),
        ("two", "acme-two"),
    ]
    reg.listing()  # listing loads them: the same handles, filled in
    assert [r.state for r in reg.plugins()] == ["loaded", "loaded"]


@pytest.mark.parametrize(
    ("environ", "reason"),
    [
        ({"ACCELCTL_DISABLE": "off"}, "disabled by ACCELCTL_DISABLE"),
        ({"ACCELCTL_PLUGINS": "on"}, "disabled: ACCELCTL_PLUGINS=on does not list it"),
    ],
)
def test_the_disabled_decision_is_made_once_by_the_registry(
    fake_site: FakeSite, environ: dict[str, str], reason: str
) -> None:
    fake_site.install("acme-off", {"off": "rec_off"}, {"rec_off": "raise SystemExit('imported')"})
    fake_site.install("acme-on", {"on": "rec_on"}, {"rec_on": good_plugin("on")})
    reg = registry(fake_site, environ)
    (record,) = reg.claimants("off")
    assert (record.state, record.reason) == ("disabled", reason)
    assert reg.claimants("on")[0].state == "not-loaded"
    assert record.load().state == "disabled" and "rec_off" not in sys.modules


def test_the_stages_are_listed_in_loading_order() -> None:
    assert AcceleratorHandle.STAGES == (
        "metadata",
        "name",
        "conflict",
        "import",
        "instantiate",
        "register",
    )


def test_every_consumer_reads_the_handles_disabled_state(fake_site: FakeSite) -> None:
    import warnings

    from accelctl import AcceleratorUnavailableError, resolve
    from accelctl.testing import validate_installed

    fake_site.install(
        "acme-policed", {"policed": "rec_policed"}, {"rec_policed": "raise SystemExit('no')"}
    )
    reg = Registry(path=fake_site.path, environ={"ACCELCTL_DISABLE": "policed"})
    reason = "disabled by ACCELCTL_DISABLE"
    (record,) = reg.claimants("policed")
    assert (record.state, record.reason) == ("disabled", reason)
    (row,) = reg.listing()
    assert (row.state, row.reason) == ("disabled", reason)
    (report,) = validate_installed(registry=reg, probe_import=False)
    assert report.disabled == reason
    with pytest.raises(AcceleratorUnavailableError, match=reason):
        reg.get("policed")
    with pytest.raises(AcceleratorUnavailableError, match=r"disabled by .*: policed"):
        resolve("auto", registry=reg, environ={})
    lightning = pytest.importorskip("accelctl.integrations.lightning")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # skipped as disabled, not warned about as broken
        result = lightning.register_all(registry=reg)
    assert result.skipped == {"policed": reason} and result.broken == {}
    assert "rec_policed" not in sys.modules


def test_the_concepts_page_names_every_state_and_stage() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "concepts.md").read_text()
    section = page.split("## 2a. One object per plugin", 1)[1].split("\n## ", 1)[0]
    states = [f'`"{state}"`' for state in AcceleratorHandle.STATES]
    stages = [f"`{stage}`" for stage in AcceleratorHandle.STAGES]
    assert [word for word in states + stages if word not in section] == []

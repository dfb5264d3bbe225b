"""The handle: one object per installed entry point, which every consumer reads.

Made by the registry's scan, with its identity, its state (and the stage at which loading failed)
and its hooks.
"""

from __future__ import annotations

import sys
import types

import pytest

import accelctl
from accelctl import AcceleratorHandle, PluginConflictError, PluginLoadError
from accelctl.testing import Registry

from fakedists import FakeSite


def registry(site: FakeSite, environ: dict[str, str] | None = None) -> Registry:
    return Registry(path=site.path, environ=environ or {})


def test_a_handle_is_not_loaded_until_asked_then_loaded_once(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"}, version="2.1")
    reg = registry(fake_site)
    (record,) = reg.claimants("good")
    assert isinstance(record, AcceleratorHandle)
    assert record.state == "not-loaded" and record.plugin is None
    assert (record.name, record.distribution, record.version) == ("good", "acme-good", "2.1")
    assert record.entry_point == "fakeplugins.good:GoodAccelerator"
    assert "fakeplugins.good" not in sys.modules  # the scan reads metadata only
    assert record.load() is record
    assert record.state == "loaded" and record.stage is None and record.error is None
    assert reg.get("good") is record  # one object, from the scan to the hook call
    assert reg.listing()[0].accelerator is record


@pytest.mark.parametrize(
    ("entry_point", "stage", "message"),
    [
        ("fakeplugins.refuses_import", "import", "libhabana.so not found"),
        ("fakeplugins.hostile:Needy", "instantiate", "no arguments"),
        ("fakeplugins.misnamed_hook", "register", "detcet"),
    ],
)
def test_each_load_failure_records_its_stage(
    fake_site: FakeSite, entry_point: str, stage: str, message: str
) -> None:
    fake_site.install("acme-bad", {"bad": entry_point})
    reg = registry(fake_site)
    (record,) = reg.claimants("bad")
    record.load()
    assert record.state == "broken" and record.stage == stage
    assert isinstance(record.error, PluginLoadError) and message in str(record.error)
    with pytest.raises(PluginLoadError, match=message):  # get() raises what the record says
        reg.get("bad")
    assert reg.listing()[0].error == " ".join(str(record.error).split())


def test_a_plugin_refused_at_register_keeps_its_object(fake_site: FakeSite) -> None:
    fake_site.install("acme-bad", {"bad": "fakeplugins.misnamed_hook"})
    (record,) = registry(fake_site).claimants("bad")
    assert record.load().stage == "register"
    # for the checks to diagnose its hooks
    assert record.plugin is sys.modules["fakeplugins.misnamed_hook"]


def test_an_invalid_name_is_stage_name_and_nothing_is_imported(fake_site: FakeSite) -> None:
    fake_site.install("oddly", {"gpu": "fakeplugins.good:GoodAccelerator"})
    (record,) = registry(fake_site).claimants("gpu")
    assert (record.load().state, record.stage) == ("broken", "name")
    assert "is reserved" in str(record.error) and "fakeplugins.good" not in sys.modules
    assert record.error is not None and record.error.__cause__ is None  # no exception showed it


def test_unreadable_metadata_is_stage_metadata_without_loading(fake_site: FakeSite) -> None:
    text = "[accelctl.accelerators]\nmeta = fakeplugins.marked\nno-equals-sign\n"
    fake_site.install_raw("acme-meta", {"entry_points.txt": text})
    reg = registry(fake_site)
    rows = reg.listing(detect=False)  # --no-detect settles it: no plugin code needed
    (record,) = reg.claimants("meta")
    assert (record.state, record.stage) == ("broken", "metadata")
    assert rows[0].state == "broken" and "cannot read the entry points" in (rows[0].error or "")
    assert "fakeplugins.marked" not in sys.modules
    assert record.error is not None and record.error.__cause__ is None  # a line, no exception


def test_two_distributions_claiming_one_name_are_two_handles_both_in_conflict(
    fake_site: FakeSite,
) -> None:
    fake_site.install("vendor-a", {"npu": "fakeplugins.good:GoodAccelerator"})
    fake_site.install("vendor-b", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    reg = registry(fake_site)
    records = reg.claimants("npu")
    assert [r.distribution for r in records] == ["vendor-a", "vendor-b"]
    # Known from the metadata alone: --no-detect shows both rows broken.
    assert [row.state for row in reg.listing(detect=False)] == ["broken", "broken"]
    with pytest.raises(PluginConflictError, match="vendor-a and vendor-b"):
        reg.get("npu")
    assert all(r.state == "broken" and r.stage == "conflict" for r in records)
    assert all(isinstance(r.error, PluginConflictError) for r in records)
    assert "fakeplugins.good" not in sys.modules
    assert "fakeplugins.undetected" not in sys.modules


def test_one_handle_per_entry_point(fake_site: FakeSite) -> None:
    fake_site.install(
        "acme-two",
        {
            "one": "fakeplugins.good:GoodAccelerator",
            "two": "fakeplugins.undetected:UndetectedAccelerator",
        },
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
    fake_site.install("acme-off", {"off": "fakeplugins.exits_at_import"})
    fake_site.install("acme-on", {"on": "fakeplugins.good:GoodAccelerator"})
    reg = registry(fake_site, environ)
    (record,) = reg.claimants("off")
    assert (record.state, record.reason) == ("disabled", reason)
    assert reg.claimants("on")[0].state == "not-loaded"
    assert record.load().state == "disabled"
    assert "fakeplugins.exits_at_import" not in sys.modules


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
    from accelctl import AcceleratorUnavailableError, resolve
    from accelctl.testing import validate_installed

    fake_site.install("acme-policed", {"policed": "fakeplugins.exits_at_import"})
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
    # (Lightning's register_all too: tests/lightning/test_lightning_aliases.py.)
    assert "fakeplugins.exits_at_import" not in sys.modules


def test_the_concepts_page_names_every_state_and_stage() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "concepts.md").read_text()
    section = page.split("## 2a. One object per plugin", 1)[1].split("\n## ", 1)[0]
    states = [f'`"{state}"`' for state in AcceleratorHandle.STATES]
    stages = [f"`{stage}`" for stage in AcceleratorHandle.STAGES]
    assert [word for word in states + stages if word not in section] == []


def test_reading_a_handles_properties_changes_nothing_identify_decides(
    fake_site: FakeSite,
) -> None:
    # A METADATA that is not UTF-8: the distribution cannot be named. Reading the handle's
    # properties is a read; identify() (which loading and a listing call) breaks the handle.
    fake_site.install_raw(
        "acme-nameless",
        {
            "METADATA": b"Name: \xff\xfe\n",
            "entry_points.txt": "[accelctl.accelerators]\nnl = x:y\n",
        },
    )
    (handle,) = registry(fake_site).claimants("nl")
    assert handle.entry_point == "x:y" and handle.version is None
    handle.distribution  # noqa: B018 - the read under test
    assert handle.state == "not-loaded" and handle.error is None
    assert handle.identify() is handle
    assert (handle.state, handle.stage) == ("broken", "metadata")
    assert "cannot read the metadata of distribution" in str(handle.error)
    # The exception reading METADATA raised is the error's cause, for --debug to show.
    assert isinstance(handle.error.__cause__, UnicodeDecodeError)


def test_only_the_handle_changes_its_state(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    (handle,) = registry(fake_site).claimants("good")
    for name in ("state", "stage", "error", "reason"):
        with pytest.raises(AttributeError):
            setattr(handle, name, None)
    assert handle.load().state == "loaded"


def test_a_mark_pluggy_leaves_as_an_object_counts_as_its_dict_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pluggy's marks of every version mark a hook; an attribute that is no mark marks nothing.

    pluggy up to 1.7 leaves a dict on a marked function; its development branch leaves its public
    ``HookimplConfiguration``. An object answering every attribute is no mark.
    """
    import pluggy

    from accelctl._host.loading import _found_hooks

    class HookimplConfiguration:
        def __init__(self, **options: object) -> None:
            self.__dict__.update(options)

    class AnswersEverything:
        def __getattr__(self, name: str) -> bool:
            return True

    monkeypatch.setattr(pluggy, "HookimplConfiguration", HookimplConfiguration, raising=False)
    plugin = types.ModuleType("vendor_plugin")

    @accelctl.hookimpl
    def accelerator_info() -> None: ...

    def detect() -> bool:
        return True

    def parse_devices(devices: object) -> None: ...

    detect.accelctl_impl = HookimplConfiguration(wrapper=False, specname=None)  # type: ignore[attr-defined]
    parse_devices.accelctl_impl = AnswersEverything()  # type: ignore[attr-defined]
    plugin.__dict__.update(accelerator_info=accelerator_info, detect=detect,
                           parse_devices=parse_devices)  # fmt: skip
    found = {name: opts for name, _, opts in _found_hooks(plugin)}
    assert found == {
        "accelerator_info": accelctl.hookimpl(lambda: None).accelctl_impl,  # type: ignore[attr-defined]
        "detect": {"wrapper": False, "specname": None},
    }

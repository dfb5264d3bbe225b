"""Discovery, loading and lookup with real installed distributions (fake dist-info folders)."""

from __future__ import annotations

import sys

import pytest

import accelctl
from accelctl import (
    AcceleratorUnavailableError,
    PluginConflictError,
    PluginHookError,
    PluginLoadError,
    UnknownAcceleratorError,
)
from accelctl.testing import Registry

from fakedists import FakeSite


def registry(site: FakeSite) -> Registry:
    return Registry(path=site.path, environ={})


def rows_by_name(reg: Registry) -> dict[str, accelctl.AcceleratorStatus]:
    return {row.name: row for row in reg.listing()}


def test_good_module_plugin_loads_with_metadata(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.marked"}, version="2.3")
    handle = registry(fake_site).get("good")
    assert (handle.name, handle.distribution, handle.version) == ("good", "acme-good", "2.3")
    assert handle.entry_point == "fakeplugins.marked"
    assert handle.detect() is True and handle.auto_device_count() == 2
    assert handle.info.priority == 10 and handle.info.description == "good test accelerator"
    assert handle.parse_devices("auto") == [0, 1]
    assert handle.device_stats("cpu") == {"memory_used_bytes": 1}


def test_class_and_instance_entry_points(fake_site: FakeSite) -> None:
    fake_site.install(
        "classy",
        {"classy": "fakeplugins.classy:ClassyAccelerator", "inst": "fakeplugins.classy:instance"},
    )
    fake_site.install("marked", {"marked": "fakeplugins.classy:Marked"})
    reg = registry(fake_site)
    classy = reg.get("classy")
    assert classy.auto_device_count() == 3
    assert [str(d) for d in classy.get_parallel_devices(classy.parse_devices(2))] == [
        "cpu:0",
        "cpu:1",
    ]
    assert classy.info.priority == 50 and classy.info.aliases == ("classy-alias",)
    assert reg.get("inst").plugin is sys.modules["fakeplugins.classy"].instance
    marked = reg.get("marked")
    assert marked.detect() is False
    assert marked.unavailable_reason() is None  # optional hook absent: no reason, no error


def test_lookup_is_case_insensitive_and_accepts_aliases(fake_site: FakeSite) -> None:
    fake_site.install("classy", {"classy": "fakeplugins.classy:ClassyAccelerator"})
    reg = registry(fake_site)
    assert reg.get(" CLASSY ").name == "classy"
    assert reg.get("Classy-Alias").name == "classy"


#: kind -> (the broken plugin's entry point, what its row's error says)
BROKEN = {
    "import": (
        "fakeplugins.refuses_import",
        "importing 'fakeplugins.refuses_import' failed: ImportError: libhabana.so not found",
    ),
    "typo": ("fakeplugins.misnamed_hook", "unknown hook(s) 'detcet' (did you mean 'detect'?)"),
    "missing": (
        "fakeplugins.unmarked_hook",
        "missing required hook(s) get_parallel_devices, device_stats; device_stats defined but "
        "not marked",
    ),
    "badarg": ("fakeplugins.unknown_argument", "which its specification does not have"),
    "raises": (
        "fakeplugins.hostile:DetectRaises",
        "hook detect() raised RuntimeError: driver exploded",
    ),
    "wrongtype": (
        "fakeplugins.hostile:CountIsText",
        "hook auto_device_count() returned '2' (str); expected a non-negative int",
    ),
    "exits": (
        "fakeplugins.exits_at_import",
        "importing 'fakeplugins.exits_at_import' failed: SystemExit: vendor runtime missing",
    ),
    "detectexits": ("fakeplugins.hostile:DetectExits", "hook detect() raised SystemExit: 3"),
    "badinfo": ("fakeplugins.hostile:PriorityIsText", "hook accelerator_info() returned"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_plugin_is_a_row_and_never_takes_others_down(fake_site: FakeSite, kind: str) -> None:
    entry_point, expected = BROKEN[kind]
    fake_site.install(f"broken-{kind}", {kind: entry_point})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    reg = registry(fake_site)
    rows = rows_by_name(reg)
    assert rows["good"].available is True and rows["good"].error is None
    row = rows[kind]
    assert row.state == "broken" and row.available is None and row.device_count is None
    assert expected in row.error, row.error
    assert f"'{kind}' (broken-{kind} 1.0)" in row.error  # names the plugin and its distribution
    # A plugin that loads and whose hook then breaks is a PluginHookError, not a load error.
    with pytest.raises((PluginLoadError, PluginHookError), match=f"'{kind}'"):
        handle = reg.get(kind)
        handle.detect()
        handle.auto_device_count()
        _ = handle.info
    # The other plugin keeps working, and auto skips the broken one with a warning.
    assert reg.get("good").detect() is True


def test_hook_errors_name_the_hook(fake_site: FakeSite) -> None:
    fake_site.install("hooky", {"hooky": "fakeplugins.hostile:NestedStats"})
    handle = registry(fake_site).get("hooky")
    with pytest.raises(PluginHookError) as info:
        handle.device_stats("cpu")
    assert info.value.hook == "device_stats" and info.value.name == "hooky"
    assert "expected int or float figures, found 'nested'" in str(info.value)
    assert isinstance(info.value.__cause__, TypeError)


def test_class_that_cannot_be_instantiated(fake_site: FakeSite) -> None:
    source = """
        import accelctl
        class Half(accelctl.Accelerator):
            def detect(self):
                return True
    """
    fake_site.install("half", {"half": "half_mod:Half"}, {"half_mod": source})
    with pytest.raises(
        PluginLoadError, match="class Half could not be instantiated with no arguments"
    ):
        registry(fake_site).get("half")


def test_conflict_names_both_distributions(fake_site: FakeSite) -> None:
    fake_site.install("vendor-a", {"npu": "fakeplugins.good:GoodAccelerator"})
    fake_site.install("vendor-b", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    reg = registry(fake_site)
    with pytest.raises(PluginConflictError) as info:
        reg.get("npu")
    assert "claimed by 2 distributions: vendor-a and vendor-b" in str(info.value)
    assert info.value.distributions == ("vendor-a", "vendor-b")
    rows = [row for row in reg.listing() if row.name == "npu"]
    assert [row.distribution for row in rows] == ["vendor-a", "vendor-b"]
    assert all("vendor-a and vendor-b" in (row.error or "") for row in rows)
    assert "fakeplugins.good" not in sys.modules  # no silent winner imported
    assert "fakeplugins.undetected" not in sys.modules


def test_alias_conflict_is_an_error(fake_site: FakeSite) -> None:
    fake_site.install("one", {"one": "fakeplugins.good:SharedAlias"})
    fake_site.install("two", {"two": "fakeplugins.good:SharedAlias"})
    with pytest.raises(PluginConflictError, match=r"alias 'shared' is claimed by one .* and two"):
        registry(fake_site).get("shared")


@pytest.mark.parametrize(
    ("name", "problem"),
    [("gpu", "is reserved"), ("Big-NPU", "is not a valid accelerator name")],
)
def test_invalid_entry_point_names(fake_site: FakeSite, name: str, problem: str) -> None:
    fake_site.install("oddly-named", {name: "fakeplugins.good:GoodAccelerator"})
    rows = registry(fake_site).listing()
    (row,) = rows
    assert row.state == "broken" and problem in (row.error or "")
    assert "fakeplugins.good" not in sys.modules


def test_named_lookup_imports_that_plugin_alone(fake_site: FakeSite) -> None:
    fake_site.install("acme-alpha", {"alpha": "fakeplugins.good:GoodAccelerator"})
    fake_site.install("acme-beta", {"beta": "fakeplugins.undetected:UndetectedAccelerator"})
    fake_site.install("acme-gamma", {"gamma": "fakeplugins.marked"})
    reg = registry(fake_site)
    reg.get("beta")
    assert "fakeplugins.undetected" in sys.modules
    assert "fakeplugins.good" not in sys.modules and "fakeplugins.marked" not in sys.modules


def test_records_without_detect_run_no_plugin_code(fake_site: FakeSite) -> None:
    fake_site.install("boom", {"boom": "fakeplugins.exits_at_import"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    rows = {row.name: row for row in registry(fake_site).listing(detect=False)}
    assert rows["boom"].state == "not-run" and rows["boom"].available is None
    assert rows["good"].distribution == "acme-good" and rows["good"].version == "1.0"
    assert "fakeplugins.exits_at_import" not in sys.modules
    assert "fakeplugins.good" not in sys.modules


@pytest.mark.parametrize(
    ("environ", "reason"),
    [
        ({"ACCELCTL_DISABLE": "boom, other"}, "disabled by ACCELCTL_DISABLE"),
        ({"ACCELCTL_PLUGINS": "good"}, "disabled: ACCELCTL_PLUGINS=good does not list it"),
        ({"ACCELCTL_PLUGINS": ""}, "disabled: ACCELCTL_PLUGINS=<empty> does not list it"),
    ],
)
def test_blocked_plugins_are_never_imported(
    fake_site: FakeSite, environ: dict[str, str], reason: str
) -> None:
    fake_site.install("boom", {"boom": "fakeplugins.exits_at_import"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    reg = Registry(path=fake_site.path, environ=environ)
    rows = {row.name: row for row in reg.listing()}
    assert rows["boom"].state == "disabled" and rows["boom"].available is None
    assert rows["boom"].reason == reason and rows["boom"].error is None
    assert "fakeplugins.exits_at_import" not in sys.modules
    with pytest.raises(AcceleratorUnavailableError, match=reason):
        reg.get("boom")


def test_unknown_name_suggests_and_teaches(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"goodness": "fakeplugins.good:GoodAccelerator"})
    reg = registry(fake_site)
    with pytest.raises(UnknownAcceleratorError) as info:
        reg.get("godness")
    message = str(info.value)
    assert "no accelerator named 'godness' is installed (installed: goodness)" in message
    assert "Did you mean 'goodness'?" in message
    with pytest.raises(
        UnknownAcceleratorError, match=r"Did you mean 'cuda'\?.*pip install accelctl-cuda"
    ):
        reg.get("cdua")
    with pytest.raises(UnknownAcceleratorError, match=r"plugin: pip install accelctl-cuda$"):
        reg.get("rocm")  # ROCm GPUs are served by the CUDA plugin
    with pytest.raises(UnknownAcceleratorError) as info:
        reg.get("xyzzy")  # no such package is known: named as the vendor's to publish
    assert "if its vendor publishes one (by convention named accelctl-xyzzy)" in str(info.value)
    assert "pip install accelctl-xyzzy" not in str(info.value)


@pytest.mark.parametrize("word", ["auto", "GPU"])
def test_selectors_are_not_accelerators(fake_site: FakeSite, word: str) -> None:
    with pytest.raises(
        UnknownAcceleratorError,
        match=r"selects an accelerator, it is not one: use accelctl.resolve",
    ):
        registry(fake_site).get(word)


def test_entry_points_are_read_once(fake_site: FakeSite) -> None:
    reg = registry(fake_site)
    assert reg.names() == []
    fake_site.install("late", {"late": "fakeplugins.good:GoodAccelerator"})
    assert reg.names() == []  # the scan is cached for the registry's life
    assert registry(fake_site).names() == ["late"]


def test_unavailable_row_has_reason_not_error(fake_site: FakeSite) -> None:
    fake_site.install("acme-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    (row,) = registry(fake_site).listing()
    assert (row.available, row.device_count, row.state) == (False, 0, "unavailable")
    assert row.reason == "no npu hardware here" and row.error is None
    assert row.to_dict()["family"] == "gpu" and "handle" not in row.to_dict()


def test_same_distribution_twice_on_path_counts_once(fake_site: FakeSite, tmp_path) -> None:
    shadow = FakeSite(tmp_path / "shadow")
    shadow.install("acme-good", {"good": "shadow_good"}, {})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    reg = Registry(path=fake_site.path + shadow.path, environ={})
    assert [h.entry_point for h in reg.claimants("good")] == ["fakeplugins.good:GoodAccelerator"]


def test_distribution_name_and_version_from_metadata_headers(fake_site: FakeSite) -> None:
    info = fake_site.install("acme-meta", {"meta": "fakeplugins.good:GoodAccelerator"})
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-meta\nVersion: 4.5.6\n\n"
        "Name: not-a-header\nVersion: 0.0.0 (the long description)\n"
    )
    (entry,) = registry(fake_site).claimants("meta")
    assert (entry.distribution, entry.version) == ("acme-meta", "4.5.6")


def test_lowercase_metadata_headers_fall_back_to_the_full_parser(fake_site: FakeSite) -> None:
    info = fake_site.install("acme-lower", {"lower": "fakeplugins.good:GoodAccelerator"})
    (info / "METADATA").write_text("metadata-version: 2.1\nname: acme-lower\nversion: 2.0\n")
    (entry,) = registry(fake_site).claimants("lower")
    assert (entry.distribution, entry.version) == ("acme-lower", "2.0")


def test_unknown_name_never_suggests_installing_what_is_installed(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-cuda", {"cuda": "fakeplugins.undetected:UndetectedAccelerator"})
    reg = registry(fake_site)
    with pytest.raises(UnknownAcceleratorError) as info:
        reg.get("cdua")
    assert "Did you mean 'cuda'?" in str(info.value) and "pip install" not in str(info.value)
    with pytest.raises(UnknownAcceleratorError) as info:
        reg.get("rocm")  # the CUDA plugin offers the alias only where AMD GPUs are
    assert "accelctl-cuda is installed but offers no 'rocm' on this machine" in str(info.value)


def test_a_plugin_installed_in_a_zip_on_the_path_is_found(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # importlib.metadata reads a zip on sys.path (a zipapp, an egg) through zipfile.Path; the
    # scan's fast reading of folders must leave those to it, not break on them.
    import zipfile

    from fakedists import FIXTURES

    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        info = "acme_zip-1.0.dist-info"
        zipped.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: acme-zip\nVersion: 1.0\n")
        zipped.writestr(
            f"{info}/entry_points.txt",
            "[accelctl.accelerators]\nzipped = fo_zipped:UndetectedAccelerator\n",
        )
        zipped.write(FIXTURES / "fakeplugins" / "undetected.py", "fo_zipped.py")
    monkeypatch.syspath_prepend(str(archive))
    [row] = Registry(path=[str(archive)]).listing()
    assert (row.name, row.distribution, row.version) == ("zipped", "acme-zip", "1.0")
    assert row.state == "unavailable" and row.error is None
    sys.modules.pop("fo_zipped", None)


def test_the_scan_finds_what_importlib_finds_on_every_kind_of_path_entry(
    fake_site: FakeSite, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scan lists folders itself (importlib's wrappers cost most of a scan of 1000
    # distributions): it must find what importlib.metadata.distributions() finds, and read what
    # it reads, on folders, a zip, an egg, a file, a missing entry, the working directory ("")
    # and another finder's distributions, one distribution per name.
    import zipfile
    from importlib import metadata

    from accelctl._host import discovery as _discovery

    fake_site.install("acme-one", {"one": "fo_one"})
    fake_site.install("Acme.Two", {"two": "fo_two"})
    (fake_site.root / "notes.txt").write_text("not a distribution")
    (fake_site.root / "Legacy-0.1.EGG-INFO").write_text("Name: legacy\nVersion: 0.1\n")  # a file
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("acme_zip-1.0.dist-info/METADATA", "Name: acme-zip\nVersion: 1.0\n")
        zipped.writestr("acme_zip-1.0.dist-info/entry_points.txt", "[accelctl.accelerators]\nz=z\n")
    egg = tmp_path / "acme_egg-1.0-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Name: acme-egg\nVersion: 1.0\n")
    (egg / "EGG-INFO" / "entry_points.txt").write_text("[accelctl.accelerators]\negg = egg\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "acme_here-2.0.dist-info").mkdir()
    (cwd / "acme_here-2.0.dist-info" / "entry_points.txt").write_text("[x]\nhere = here\n")
    monkeypatch.chdir(cwd)

    class OtherFinder:  # a finder of its own (a bundler's, say), asked after the path
        @staticmethod
        def find_spec(*args: object) -> None:
            return None

        @staticmethod
        def find_distributions(context: metadata.DistributionFinder.Context) -> list[object]:
            return [metadata.PathDistribution(fake_site.root / "acme_one-1.0.dist-info")]

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, OtherFinder])
    path = [*fake_site.path, str(archive), str(egg), str(tmp_path / "missing"), ""]
    path.append(str(fake_site.root / "notes.txt"))

    ours = [(key, _discovery.folder_of(origin)) for key, origin in _discovery.distributions(path)]
    theirs = [(_discovery.dist_key(d), str(d._path)) for d in metadata.distributions(path=path)]
    assert sorted(ours) == sorted(theirs)
    assert {key for key, _ in ours} == {
        "acme_one",
        "acme_two",
        "legacy",
        "acme_zip",
        "acme_egg",
        "acme_here",
    }
    found = {(f.name, f.value) for f in _discovery.scan(path)}
    assert found == {("one", "fo_one"), ("two", "fo_two"), ("z", "z"), ("egg", "egg")}


def test_a_typo_of_a_selector_is_suggested_not_a_plugin_to_install(fake_site: FakeSite) -> None:
    with pytest.raises(UnknownAcceleratorError) as caught:
        registry(fake_site).get("gpus")
    assert "Did you mean 'gpu'?" in str(caught.value)
    assert "pip install" not in str(caught.value)


def test_an_unknown_name_says_which_plugin_could_not_say_its_aliases(
    fake_site: FakeSite,
) -> None:
    # The name may be that plugin's alias (a backend's own name, as openreg is privateuse1's):
    # "no accelerator named" alone would send the user to install what they have.
    fake_site.install("acme-quiet", {"quiet": "fakeplugins.hostile:InfoRaises"})
    with pytest.raises(UnknownAcceleratorError) as caught:
        registry(fake_site).get("whisper")
    message = str(caught.value)
    assert "It may be an alias of a plugin that could not say its aliases (quiet:" in message
    assert "driver query failed" in message
    assert "pip install" not in message

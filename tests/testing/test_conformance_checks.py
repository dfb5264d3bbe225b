"""The conformance checks on good and broken plugins, installed as real (fake) distributions."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import accelctl
import accelctl.testing
from accelctl.testing import CHECK_IDS, ValidationReport, validate, validate_installed
from accelctl.testing import _plugin_checks as plugin_checks

from fakedists import FakeSite


def run(site: FakeSite, name: str, **options: object) -> ValidationReport:
    options.setdefault("probe_import", False)
    return validate(name, registry=accelctl.testing.Registry(path=site.path), **options)  # type: ignore[arg-type]


def statuses(report: ValidationReport) -> dict[str, str]:
    return {result.check: result.status for result in report.checks}


def failed(report: ValidationReport) -> dict[str, str]:
    return {result.check: result.detail for result in report.failures}


# -- correct plugins --------------------------------------------------------------------------


def test_a_working_plugin_passes_every_check(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-good", {"good": "fakeplugins.good:GoodAccelerator"})
    report = run(fake_site, "good", probe_import=True)
    assert report.passed, failed(report)
    assert [r.check for r in report.checks] == list(CHECK_IDS)
    skipped = {r.check for r in report.checks if r.status == "skip"}
    # Detected, so the reason hook is not for here; environment_info is not implemented.
    assert skipped == {"unavailable_reason", "environment_info"}
    assert report.result("devices_auto").detail == "'auto' -> [0, 1] -> [cpu, cpu]"
    assert report.result("import_is_light").detail.startswith("'fakeplugins.good' imports in")
    assert (report.distribution, report.version) == ("accelctl-good", "1.0")


def test_absent_hardware_passes_with_device_checks_skipped(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    report = run(fake_site, "npu")
    assert report.passed, failed(report)
    for check in ("devices_auto", "devices_minus_one", "devices_one", "device_stats"):
        result = report.result(check)
        assert result.status == "skip"
        assert result.detail == "needs the hardware: not detected here: no npu hardware here"
    assert report.result("bad_device_specs").status == "pass"  # parsing needs no hardware
    assert report.result("unavailable_reason").detail == "'no npu hardware here'"


def test_alias_is_validated_under_its_canonical_name(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-xpu", {"xpu": "fakeplugins.undetected:ArcAlias"})
    report = run(fake_site, "ARC")
    assert report.name == "xpu" and report.passed


# -- broken plugins ---------------------------------------------------------------------------


def test_import_error_fails_loads_with_its_cause(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-bad", {"bad": "fakeplugins.lacks_runtime"})
    report = run(fake_site, "bad")
    assert not report.passed
    detail = report.result("loads").detail
    assert "accelctl-bad 1.0" in detail
    assert "ModuleNotFoundError: No module named 'vendor_runtime_that_is_missing'" in detail
    assert isinstance(report.result("loads").error, accelctl.PluginLoadError)
    assert set(statuses(report).values()) == {"fail", "skip"}
    assert report.result("detect_returns_bool").detail == "the plugin did not load"


def test_raising_hook_fails_with_the_exception(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-raise", {"raiser": "fakeplugins.hostile:DetectRaises"})
    report = run(fake_site, "raiser")
    assert failed(report) == {
        "detect_returns_bool": "hook detect() raised RuntimeError: driver exploded"
    }
    assert isinstance(report.result("detect_returns_bool").error.__cause__, RuntimeError)  # type: ignore[union-attr]
    assert report.result("devices_auto").detail == "needs the hardware: detect() failed"


def test_wrong_return_types_each_fail_their_check(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-types", {"types": "fakeplugins.conformance:WrongTypes"})
    problems = failed(run(fake_site, "types"))
    assert set(problems) == {"auto_device_count", "unavailable_reason", "accelerator_info"}
    assert "returned -1 (int); expected a non-negative int" in problems["auto_device_count"]
    assert "returned 42 (int); expected a str or None" in problems["unavailable_reason"]
    assert "priority must be an int, not str" in problems["accelerator_info"]


def test_environment_info_is_checked_where_implemented(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-plain", {"plain": "fakeplugins.undetected:UndetectedAccelerator"})
    plain = run(fake_site, "plain").result("environment_info")
    assert (plain.status, plain.detail) == (
        "skip",
        "not implemented (optional): `accelctl env` shows the row alone",
    )
    fake_site.install("accelctl-facts", {"facts": "fakeplugins.facts:Facts"})
    passed = run(fake_site, "facts").result("environment_info")
    assert (passed.status, passed.detail) == (
        "pass",
        "5 facts: acme_driver, cards, busy, ecc, firmware",
    )
    fake_site.install("accelctl-nested", {"nested": "fakeplugins.facts:FactIsNested"})
    problems = failed(run(fake_site, "nested"))
    assert set(problems) == {"environment_info"}
    assert (
        "returned {'nested': {'a': 1}} (dict); expected str, int, float, bool or None values"
        in problems["environment_info"]
    )


def test_detect_returning_a_non_bool_fails(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-yes", {"yes": "fakeplugins.conformance:DetectSaysYes"})
    problems = failed(run(fake_site, "yes"))
    assert problems["detect_returns_bool"] == "hook detect() returned 'yes' (str); expected a bool"


def test_unknown_hook_fails_hooks_match_specs_with_a_suggestion(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-unk", {"unk": "fakeplugins.extra_hook"})
    report = run(fake_site, "unk")
    detail = report.result("hooks_match_specs").detail
    assert detail.startswith("unknown hook(s) 'device_count' (did you mean ")
    assert report.result("required_hooks").status == "pass"
    assert report.result("loads").status == "pass"  # it imports; it does not register
    assert report.result("detect_returns_bool").status == "skip"


def test_pluggy_validation_error_names_the_argument(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-args", {"args": "fakeplugins.unknown_argument"})
    detail = run(fake_site, "args").result("hooks_match_specs").detail
    assert "auto_device_count" in detail and "colour" in detail


def test_missing_required_hook_names_it_and_spots_a_missing_marker(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-miss", {"miss": "fakeplugins.unmarked_hook"})
    detail = run(fake_site, "miss").result("required_hooks").detail
    assert detail == (
        "missing required hook(s) get_parallel_devices, device_stats; device_stats defined but "
        "not marked with @accelctl.hookimpl"
    )


def test_name_conflict_fails_naming_both_distributions(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-npu-a", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    fake_site.install("accelctl-npu-b", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    report = run(fake_site, "npu")
    detail = report.result("loads").detail
    assert "accelctl-npu-a and accelctl-npu-b" in detail
    assert report.result("loads").status == "fail"


def test_reserved_entry_point_name_fails_loads(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-gpu", {"gpu": "fakeplugins.undetected:UndetectedAccelerator"})
    detail = run(fake_site, "gpu").result("loads").detail
    assert "entry point name 'gpu' is reserved" in detail


def test_unknown_name_fails_loads_with_the_installed_names(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    detail = run(fake_site, "nup").result("loads").detail
    assert "no accelerator named 'nup' is installed (installed: npu)" in detail
    assert "Did you mean 'npu'?" in detail


def test_bad_specs_raising_value_error_instead_of_device_spec_error(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-int", {"intp": "fakeplugins.conformance:IntParser"})
    detail = run(fake_site, "intp").result("bad_device_specs").detail
    assert "devices=0: hook parse_devices() raised ValueError: need at least one device" in detail
    assert "devices=1.5 was accepted as 1" in detail
    assert "devices=True was accepted as 1" in detail
    assert "devices=None: hook parse_devices() raised TypeError" in detail
    assert "raised ValueError: invalid literal for int() with base 10: 'abc'" in detail


def test_device_spec_error_must_repeat_the_spec(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-quiet", {"quiet": "fakeplugins.conformance:SpecNotRepeated"})
    detail = run(fake_site, "quiet").result("bad_device_specs").detail
    assert "devices='abc': the DeviceSpecError does not repeat the spec" in detail


def test_count_must_agree_with_detect(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-cnt", {"cnt": "fakeplugins.conformance:CountsWhileUndetected"})
    detail = run(fake_site, "cnt").result("auto_device_count").detail
    assert detail == "returned 3 while detect() is False; return 0 when not detected"


def test_round_trip_with_the_wrong_number_of_devices_fails(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-dup", {"dup": "fakeplugins.conformance:OneDeviceForAll"})
    problems = failed(run(fake_site, "dup"))
    assert set(problems) == {"devices_auto", "devices_minus_one"}
    assert problems["devices_auto"] == "'auto' -> [0, 1] -> [cpu]: 1 devices for 2 processes"


def test_device_indices_must_follow_the_parsed_indices(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-rev", {"rev": "fakeplugins.conformance:ReversedCudaDevices"})
    detail = failed(run(fake_site, "rev"))["devices_auto"]
    assert detail.endswith("device indices do not follow the parsed indices in order")


def test_stats_outside_the_vocabulary_fail(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-voc", {"voc": "fakeplugins.conformance:OffVocabularyStats"})
    detail = failed(run(fake_site, "voc"))["device_stats"]
    assert detail.startswith("'mem' is neither a common key nor prefixed with 'voc.' (the ")
    assert "voc.queue_depth" not in detail  # its own prefix: allowed


@pytest.mark.parametrize(
    ("plugin", "problem"),
    [
        ("PercentOverHundred", "'utilization_percent' is 150.0: a percentage is 0 to 100"),
        ("NegativeBytes", "'memory_used_bytes' is -1: bytes cannot be negative"),
        (
            "AllocatedOverReserved",
            "memory_allocated_bytes (2147483648) exceeds memory_reserved_bytes (1073741824)",
        ),
        (
            "ReservedOverTotal",
            "memory_reserved_bytes (5368709120) exceeds memory_total_bytes (4294967296)",
        ),
        ("MegabyteKey", "'units.free_mb': _mb is not a unit of the vocabulary; convert to _bytes"),
        ("InfiniteFigure", "'power_watts' is inf: a figure is finite, or NaN when it cannot"),
        ("ForeignPrefix", "'cuda.num_ooms' is prefixed with another name than 'units.'"),
    ],
)
def test_each_rule_of_the_stats_vocabulary_fails_the_check(
    fake_site: FakeSite, plugin: str, problem: str
) -> None:
    fake_site.install("accelctl-units", {"units": f"fakeplugins.conformance:{plugin}"})
    report = run(fake_site, "units")
    detail = failed(report)["device_stats"]
    assert detail.startswith(problem), detail
    assert "(the vocabulary of accelctl.stats_keys" in detail
    assert set(failed(report)) == {"device_stats"}


def test_nan_for_a_figure_unreadable_now_and_prefixed_units_pass(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-units", {"units": "fakeplugins.conformance:UnreadableNow"})
    result = run(fake_site, "units").result("device_stats")
    assert result.status == "pass", result.detail
    assert "temperature_celsius" in result.detail and "units.num_allocs" in result.detail


def test_a_peak_is_checked_for_its_shape_and_its_units(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-sheet", {"sheet": "fakeplugins.conformance:DatasheetPeak"})
    fake_site.install("accelctl-tera", {"tera": "fakeplugins.conformance:TeraflopsPeak"})
    fake_site.install("accelctl-num", {"num": "fakeplugins.conformance:NumberPeak"})
    fake_site.install("accelctl-half", {"half": "fakeplugins.conformance:PeakForTorchDevicesOnly"})
    sheet = run(fake_site, "sheet").result("device_peak")
    assert (sheet.status, sheet.detail) == (
        "pass",
        "cpu: bfloat16 4e+14, float32 1e+14 FLOP/s; bandwidth 2000000000000.0 B/s; source X1 "
        "datasheet",
    )
    tera = failed(run(fake_site, "tera"))["device_peak"]
    assert tera == (
        "flops['bfloat16'] = 989.5 is outside 1e+09..1e+18 FLOP/s per device: give FLOPs per "
        "second (989e12, not 989 TFLOPs); memory_bandwidth_bytes_per_second = 3.35 is outside "
        "1e+08..1e+15: give bytes per second (3.35e12, not 3.35 TB/s)"
    )
    number = failed(run(fake_site, "num"))["device_peak"]
    assert "expected a DevicePeak, a dict of its fields, or None (unknown), not float" in number
    half = failed(run(fake_site, "half"))["device_peak"]
    assert half == "torch.device('cpu') and the str 'cpu' give different peaks"


def test_nested_stats_fail(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-nest", {"nest": "fakeplugins.hostile:NestedStats"})
    detail = failed(run(fake_site, "nest"))["device_stats"]
    assert "expected int or float figures, found 'nested'" in detail


def test_info_with_unknown_family_and_clashing_aliases(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    fake_site.install("accelctl-tpu", {"tpu": "fakeplugins.undetected:CloudAlias"})
    fake_site.install("accelctl-ipu", {"ipu": "fakeplugins.undetected:GreedyAliases"})
    detail = failed(run(fake_site, "ipu"))["accelerator_info"]
    assert "family 'accelerator' is unknown (known: gpu, or None)" in detail
    assert "'npu' is the name of the installed accelerator 'npu'" in detail
    assert "'cloudtpu' is also an alias of tpu" in detail
    assert "'auto' is reserved" in detail


def test_slow_detect_fails(fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin_checks, "DETECT_CALL_LIMIT_S", 0.02)
    fake_site.install("accelctl-slow", {"slow": "fakeplugins.conformance:SlowDetect"})
    detail = failed(run(fake_site, "slow"))["detect_is_fast"]
    assert "over the limit of 0.02 s for later calls" in detail


def test_detect_that_initialises_cuda_fails(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    # No GPU here: a flag stands in for the CUDA runtime's state.
    state = {"initialised": False}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: state["initialised"])
    monkeypatch.setattr(torch.cuda, "init", lambda: state.update(initialised=True))
    fake_site.install("accelctl-ctx", {"ctx": "fakeplugins.conformance:DetectInitialisesCuda"})
    detail = failed(run(fake_site, "ctx"))["detect_leaves_cuda_uninitialised"]
    assert detail.startswith("detect() initialised CUDA")
    # CUDA already initialised before detect(): the check cannot tell, so it skips.
    result = run(fake_site, "ctx").result("detect_leaves_cuda_uninitialised")
    assert result.status == "skip" and "before detect() ran" in result.detail


@pytest.fixture
def declare_backend(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str | None], None]:
    """``declare_backend(backend)`` installs ``dist``, which declares ``backend``."""

    def install(backend: str | None) -> None:
        if backend is None:
            monkeypatch.delenv("FAKEPLUGINS_BACKEND", raising=False)
        else:
            monkeypatch.setenv("FAKEPLUGINS_BACKEND", backend)
        fake_site.install("accelctl-dist", {"dist": "fakeplugins.conformance:DeclaredBackend"})

    return install


@pytest.mark.parametrize(
    ("backend", "problem"),
    [
        ("nccl", "does not support 'cpu' tensors (it is registered for cuda)"),
        ("nosuchccl", "is not a torch.distributed backend this torch knows"),
        ("cuda:nccl", "names no backend for device type 'cpu'"),
    ],
)
def test_a_declared_backend_that_cannot_carry_the_devices_fails(
    fake_site: FakeSite, declare_backend: Callable[[str | None], None], backend: str, problem: str
) -> None:
    declare_backend(backend)
    detail = failed(run(fake_site, "dist"))["distributed_backend"]
    assert detail.startswith(f"distributed_backend={backend!r} {problem}")
    assert "accelctl launch --devices 2` would fail in every rank" in detail


@pytest.mark.parametrize("backend", ["gloo", "cpu:gloo,cuda:nccl", None])
def test_a_backend_registered_for_the_devices_or_none_passes(
    fake_site: FakeSite, declare_backend: Callable[[str | None], None], backend: str | None
) -> None:
    declare_backend(backend)
    result = run(fake_site, "dist").result("distributed_backend")
    assert result.status == "pass", result


def test_the_backend_check_skips_without_the_hardware(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    result = run(fake_site, "npu").result("distributed_backend")
    assert result.status == "skip" and "not detected here" in result.detail


@pytest.mark.slow
def test_detect_is_fast_times_the_vendor_runtime_torch_autoloads(
    fake_site: FakeSite, tmp_path: Path
) -> None:
    """The runtime's import is charged to the first detect(), not hidden by importing torch first.

    The plugin's cost: torch (with its backends) is not imported before the clock starts. A fresh
    process, since torch must not be imported yet; TORCH_DEVICE_BACKEND_AUTOLOAD is on there, as on
    a user's machine.
    """
    fake_site.install(
        "slow-runtime", {"slow": "fakeplugins.slow_runtime:_autoload"}, group="torch.backends"
    )
    fake_site.install("accelctl-vendor", {"vendor": "fakeplugins.conformance:DetectsTheRuntime"})
    code = textwrap.dedent(
        f"""
        import json, accelctl
        from accelctl.testing import validate
        registry = accelctl.testing.Registry(path=[{str(fake_site.root)!r}])
        report = validate("vendor", registry=registry, probe_import=False)
        print(json.dumps(report.result("detect_returns_bool").to_dict()))
        print(json.dumps(report.result("detect_is_fast").to_dict()))
        """
    )
    pythonpath = os.pathsep.join(fake_site.path)
    env = {**os.environ, "PYTHONPATH": pythonpath, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    # A hang guard only, generous for a loaded 2-core machine: importing torch takes seconds.
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    import json

    assert json.loads(done.stdout.splitlines()[-2])["detail"] == "detect() returned True"
    result = json.loads(done.stdout.splitlines()[-1])
    assert "the first includes loading torch backend(s) slow" in result["detail"]
    first_ms = result["detail"].split("first call ")[1].split(",")[0]
    seconds = (
        float(first_ms.removesuffix(" ms")) / 1000
        if "ms" in first_ms
        else float(first_ms.removesuffix(" s"))
    )
    assert seconds >= 0.4  # the runtime's 0.4 s import is on the plugin's clock


@pytest.mark.slow
def test_module_level_torch_import_fails_import_is_light(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-heavy", {"heavy": "fakeplugins.heavy:HeavyAccelerator"})
    report = run(fake_site, "heavy", probe_import=True)
    assert failed(report) == {
        "import_is_light": "importing 'fakeplugins.heavy' imports torch: `accelctl list` would "
        "pay for it; import it inside the hooks that need it"
    }


# -- instances and the default selection ------------------------------------------------------


class _TwoDevices(accelctl.Accelerator):
    name = "duo"
    device_type = "cpu"

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2

    def get_parallel_devices(self, devices: object) -> list[object]:
        import torch

        return [torch.device("cpu")] * len(devices)  # type: ignore[arg-type]


def test_an_instance_without_entry_point_is_validated() -> None:
    report = validate(_TwoDevices(), probe_import=False)
    assert report.passed, failed(report)
    assert (report.name, report.distribution) == ("duo", None)
    assert report.result("loads").detail.startswith("imported object <")
    assert report.result("devices_one").detail == "1 -> [0] -> [cpu]"


def test_a_plugin_whose_module_cannot_be_imported_by_name_skips_the_import_probe() -> None:
    nowhere = type("Nowhere", (_TwoDevices,), {"__module__": "no_such_module_anywhere"})
    result = validate(nowhere()).result("import_is_light")
    assert result.status == "skip"
    assert "'no_such_module_anywhere' cannot be imported by name" in result.detail


def test_an_abstract_class_fails_loads_naming_the_missing_hook() -> None:
    class Half(accelctl.Accelerator):
        name = "half"

        def detect(self) -> bool:
            return False

    detail = validate(Half).result("loads").detail
    assert "could not be instantiated" in detail and "auto_device_count" in detail


def test_disabled_plugins_are_skipped_by_default_but_fail_when_named(
    fake_site: FakeSite,
) -> None:
    fake_site.install("accelctl-npu", {"npu": "fakeplugins.undetected:UndetectedAccelerator"})
    fake_site.install("accelctl-boom", {"boom": "fakeplugins.exits_at_import"})
    registry = accelctl.testing.Registry(path=fake_site.path, environ={"ACCELCTL_DISABLE": "boom"})
    reports = validate_installed(registry=registry, probe_import=False)
    assert [(r.name, r.passed) for r in reports] == [("boom", True), ("npu", True)]
    assert {r.status for r in reports[0].checks} == {"skip"}
    assert reports[0].result("loads").detail == "disabled by ACCELCTL_DISABLE; not imported"
    assert "fakeplugins.exits_at_import" not in sys.modules
    named = validate_installed(["boom"], registry=registry, probe_import=False)[0]
    assert named.result("loads").detail.startswith("'boom' is disabled by ACCELCTL_DISABLE")


# -- the pytest face ----------------------------------------------------------------------------


def test_pytest_face_turns_results_into_outcomes(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-face", {"face": "fakeplugins.hostile:DetectFailsWithOSError"})

    class TestFace(accelctl.testing.AcceleratorConformance):
        accelerator = "face"
        probe_import = False

    case = TestFace()
    case.test_loads()  # type: ignore[attr-defined]
    with pytest.raises(accelctl.testing.ConformanceFailure, match="driver gone") as info:
        case.test_detect_returns_bool()  # type: ignore[attr-defined]
    assert isinstance(info.value.__cause__, accelctl.PluginHookError)
    with pytest.raises(pytest.skip.Exception, match="devices_auto: needs the hardware"):
        case.test_devices_auto()  # type: ignore[attr-defined]
    assert sorted(n for n in dir(TestFace) if n.startswith("test_")) == sorted(
        f"test_{check}" for check in CHECK_IDS
    )


def test_pytest_face_needs_an_accelerator() -> None:
    class TestNothing(accelctl.testing.AcceleratorConformance):
        pass

    with pytest.raises(TypeError, match='set the class attribute accelerator = "<name>"'):
        TestNothing().test_loads()  # type: ignore[attr-defined]


@pytest.mark.slow
def test_pytest_collects_one_test_per_check(fake_site: FakeSite, tmp_path: Path) -> None:
    fake_site.install("accelctl-ci", {"ci": "fakeplugins.conformance:CountsWhileUndetected"})
    test_file = tmp_path / "test_vendor_ci.py"
    test_file.write_text(
        "import accelctl.testing\n\n"
        "class TestCI(accelctl.testing.AcceleratorConformance):\n"
        "    accelerator = 'ci'\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*fake_site.path, *sys.path]))
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    out = completed.stdout
    assert completed.returncode == 1, out
    assert "1 failed, 11 passed, 7 skipped" in out  # one test per check, 19 in all
    assert "FAILED test_vendor_ci.py::TestCI::test_auto_device_count" in out
    assert "returned 3 while detect() is False" in out

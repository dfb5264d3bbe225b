"""The capability matrix, ``accelctl validate --capabilities``: each plugin in its own process.

Each available plugin in a fresh process, the others listed as they are; a probe that crashes or
hangs is a row saying so, never the command's end; the exit status; the pytest class's
``expected_capabilities``.

What the child reports is read in this process (``matrix._report_of``) and tested here without a
child; the runs that start probe processes (the CPU plugin, two hostile plugins) are ``slow``, one
run each shared by their assertions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from cliharness import Cli, strict_json
from fakeaccelerators import MetaAccelerator

import accelctl
import accelctl.testing
from accelctl import KernelGaps
from accelctl._kernels.cases import CASES
from accelctl._kernels.probe import MissingKernel
from accelctl.capabilities import CAPABILITIES, Capability
from accelctl.testing import CapabilityReport, matrix

from fakedists import FakeSite

ALL_YES = [{"name": name, "supported": True, "reason": "ran"} for name in CAPABILITIES]
HEADER = {"device": "cpu", "distributed_backend": "gloo"}


def report_of(messages: list[dict[str, Any]], stopped: str | None = None, code: int = 0):
    handle = accelctl.AcceleratorHandle("fake")
    return matrix._report_of(handle, messages, stopped, code, "last words")


# -- what the child said, read in this process ---------------------------------------------------


def test_every_row_answered_is_a_probed_report() -> None:
    report = report_of([HEADER, *ALL_YES])
    assert (report.state, report.device, report.distributed_backend) == ("probed", "cpu", "gloo")
    assert [c.name for c in report.capabilities] == list(CAPABILITIES)
    assert report.passed and report.fsdp_gaps == ()
    assert report.to_dict()["fsdp"] is True


def test_a_crash_leaves_the_rows_before_it_and_names_the_probe_it_was_in() -> None:
    report = report_of([HEADER, *ALL_YES[:6]], code=-11)
    assert report.state == "probe-failed"
    assert report.reason == (
        "the probe process was killed by SIGSEGV while probing ddp (its last output: last words)"
    )
    assert report.problems == (report.reason,)
    assert report.fsdp_gaps is None  # not every row was probed: no verdict
    rows = {c.name: c for c in report.capabilities}
    assert list(rows) == list(CAPABILITIES)
    assert rows["storage-resize"] == Capability("storage-resize", True, "ran")
    assert rows["ddp"] == Capability("ddp", False, "the probe process was killed by SIGSEGV here")
    assert rows["compile"].reason == (
        "not probed: the probe process was killed by SIGSEGV while probing ddp"
    )


def test_a_hang_is_named_with_its_deadline() -> None:
    report = report_of([HEADER], stopped="did not answer within 5 s")
    assert report.reason is not None
    assert report.reason.startswith(
        "the probe process did not answer within 5 s while probing bf16-autocast"
    )
    assert not report.passed


def test_a_plugin_that_fails_before_probing_is_a_problem() -> None:
    report = report_of([{"error": "PluginHookError: setup_device() raised OSError: busy"}])
    assert (report.state, report.capabilities) == ("probe-failed", ())
    assert report.problems == (
        "the probe process could not start probing: PluginHookError: setup_device() raised "
        "OSError: busy",
    )
    assert report.fsdp_gaps is None and report.to_dict()["fsdp"] is None


def test_a_process_that_dies_before_saying_anything_says_how() -> None:
    report = report_of([], code=3)
    assert report.reason == "the probe process exited with status 3 (its last output: last words)"
    assert report.capabilities == ()


def test_missing_capabilities_are_facts_not_problems() -> None:
    rows = [dict(row, supported=row["name"] != "storage-resize") for row in ALL_YES]
    report = report_of([HEADER, *rows])
    assert report.passed
    assert [gap.name for gap in report.fsdp_gaps or ()] == ["storage-resize"]


def test_a_declared_backend_on_which_ddp_fails_is_a_problem() -> None:
    rows = [dict(row, supported=False, reason="RuntimeError: no") if row["name"] == "ddp" else row
            for row in ALL_YES]  # fmt: skip
    report = report_of([HEADER, *rows])
    assert report.problems == (
        "it declares distributed_backend 'gloo', but ddp fails on it: RuntimeError: no",
    )
    one_process = report_of([{"device": "cpu", "distributed_backend": None}, *rows])
    assert one_process.passed


def test_the_kernels_rows_findings_and_declared_gaps_come_through() -> None:
    found = MissingKernel(
        op="aten::convolution",
        phase="forward",
        state="missing",
        seen="NotImplementedError: convolution_overrideable not implemented.",
        cases=("conv1d", "conv2d"),
        kernel="aten::convolution_overrideable",
        fallback=True,
    )
    gaps = KernelGaps(missing=("aten::convolution_overrideable",), note="no convolution yet")
    row = Capability("kernels", False, "missing", (found,), ("conv1d", "conv2d"), gaps)
    messages = [HEADER, *ALL_YES[:-1], row.to_dict()]
    report = report_of(json.loads(json.dumps(messages)))  # as the child's JSON lines carry them
    assert report.capability("kernels") == row
    assert report.to_dict()["capabilities"][-1] == row.to_dict()
    assert report.capability("ddp") == Capability("ddp", True, "ran")  # the others: 3 fields
    assert set(report.capability("ddp").to_dict()) == {"name", "supported", "reason"}


def test_the_table_lists_the_kernels_missing_under_their_row(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = MissingKernel(
        op="aten::scaled_dot_product_attention",
        phase="backward",
        state="missing",
        seen="RuntimeError: tensor does not have a device",
        cases=("scaled_dot_product_attention",),
        kernel="aten::_scaled_dot_product_fused_attention_overrideable_backward",
        why_no_fallback="the CPU has no such kernel either",
    )
    gaps = KernelGaps(never_fall_back=("aten::add.Tensor",), note="a vendor's choice")
    rows = (
        *(Capability(name, True, "ran") for name in CAPABILITIES[:-1]),
        Capability("kernels", False, "missing or wrong", (found,), ("sdpa",), gaps),
    )
    report = CapabilityReport("dev", "probed", "acme-dev", "2.0", None, "dev:0", "dccl", rows)
    monkeypatch.setattr("accelctl.testing.command.probe_installed", lambda *a, **k: [report])
    result = cli("validate", "--capabilities")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = lines.index(f"  no   {'kernels'.ljust(22)}  missing or wrong")
    assert lines[at + 1 : at + 3] == [
        " " * 31 + "aten::scaled_dot_product_attention backward "
        "(aten::_scaled_dot_product_fused_attention_overrideable_backward): missing in "
        "scaled_dot_product_attention: RuntimeError: tensor does not have a device; "
        "ACCELCTL_CPU_FALLBACK=1 runs it on the CPU: no: the CPU has no such kernel either",
        " " * 31 + "the plugin declares (kernel_gaps): never on the CPU aten::add.Tensor "
        "(a vendor's choice)",
    ]


def test_a_report_names_its_rows_when_asked_for_another() -> None:
    with pytest.raises(KeyError, match="no capability 'fsdp' in the report of 'fake'"):
        report_of([HEADER, *ALL_YES]).capability("fsdp")


# -- the command, with no probe process ---------------------------------------------------------


def test_timeout_without_capabilities_is_a_usage_error(cli: Cli) -> None:
    result = cli("validate", "--timeout", "5")
    assert result.exit_code == 2
    assert "--timeout goes with --capabilities" in result.output


def test_plugins_that_are_not_available_are_listed_not_probed(
    cli: Cli, fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.install("acme-ghost", {"ghost": "fakeplugins.undetected:UndetectedAccelerator"})
    monkeypatch.setattr(matrix, "_probe_in_child", _no_child)
    result = cli("validate", "--capabilities", "ghost", "--json")
    assert result.exit_code == 0, result.output
    (ghost,) = strict_json(result.stdout)
    assert ghost == {
        "name": "ghost",
        "distribution": "acme-ghost",
        "version": "1.0",
        "state": "unavailable",
        "reason": "no ghost hardware here",
        "device": None,
        "distributed_backend": None,
        "passed": True,
        "problems": [],
        "fsdp": None,
        "capabilities": [],
    }


def test_a_plugin_asked_for_by_name_and_alias_is_reported_once(
    cli: Cli, fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.install("acme-ghost", {"ghost": "fakeplugins.undetected:SpookAlias"})
    monkeypatch.setattr(matrix, "_probe_in_child", _no_child)
    reports = cli.json("validate", "--capabilities", "spook", "GHOST")
    assert [(r["name"], r["state"]) for r in reports] == [("ghost", "unavailable")]


def test_a_name_nothing_has_and_a_disabled_plugin_named_are_problems(
    cli: Cli, fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.install("acme-ghost", {"ghost": "fakeplugins.undetected:UndetectedAccelerator"})
    monkeypatch.setattr(matrix, "_probe_in_child", _no_child)
    result = cli("validate", "--capabilities", "ghots", "ghost", env={"ACCELCTL_DISABLE": "ghost"})
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ghots: unknown: no accelerator named 'ghots'"), lines[0]
    assert "did you mean 'ghost'" in lines[0].lower()
    assert lines[2] == "ghost (acme-ghost 1.0): disabled: disabled by ACCELCTL_DISABLE"
    assert lines[-1] == (
        "0 accelerator(s) probed; not probed: ghots (unknown), ghost (disabled); "
        "problems: ghots, ghost"
    )


def _no_child(handle: accelctl.AcceleratorHandle, timeout: float) -> CapabilityReport:
    raise AssertionError(f"{handle.name} is not available: no probe process may start for it")


def test_the_table_says_yes_or_no_with_the_reason_and_fsdp2s_verdict(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = tuple(Capability(name, name != "storage-resize", f"why {name}") for name in CAPABILITIES)
    reports = [
        CapabilityReport("dev", "probed", "acme-dev", "2.0", None, "dev:0", "dccl", rows),
        CapabilityReport("gone", "unavailable", "acme-gone", "1.0", "no gone hardware here"),
    ]
    monkeypatch.setattr("accelctl.testing.command.probe_installed", lambda *a, **k: reports)
    result = cli("validate", "--capabilities")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "dev (acme-dev 2.0) on dev:0, distributed backend dccl: FSDP2 lacks storage-resize",
        *(
            f"  {'yes' if row.supported else 'no '}  {row.name.ljust(22)}  {row.reason}"
            for row in rows
        ),
        "",
        "gone (acme-gone 1.0): unavailable: no gone hardware here",
        "",
        "1 accelerator(s) probed; not probed: gone (unavailable)",
    ]


# -- an accelerator without an entry point, probed in this process --------------------------------


def test_an_instance_is_probed_in_this_process_on_its_first_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probed: list[tuple[str, str | None]] = []

    def rows(device_type: str, backend: str | None, **options: Any) -> Iterator[Capability]:
        probed.append((device_type, backend))
        yield from (Capability(name, True, "ran") for name in CAPABILITIES)

    monkeypatch.setattr(matrix, "iter_capabilities", rows)
    accelerator = MetaAccelerator(backend="gloo")
    report = accelctl.testing.probe_accelerator(accelerator)
    assert (report.name, report.state, report.device) == ("metaacc", "probed", "meta:0")
    assert probed == [("meta", "gloo")]
    assert accelerator.set_up == ["meta:0"]  # setup_device made it current first


def test_an_instance_whose_device_is_absent_is_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Absent(MetaAccelerator):
        def detect(self) -> bool:
            return False

        def unavailable_reason(self) -> str:
            return "no meta hardware here"

    monkeypatch.setattr(matrix, "iter_capabilities", None)  # never reached
    report = accelctl.testing.probe_accelerator(Absent())
    assert (report.state, report.reason, report.passed) == (
        "unavailable",
        "no meta hardware here",
        True,
    )


# -- the pytest class --------------------------------------------------------------------------


def _face(expected: dict[str, bool], report: CapabilityReport) -> Any:
    class TestClaims(accelctl.testing.AcceleratorConformance):
        accelerator = "dev"
        expected_capabilities = expected

        @classmethod
        def capability_report(cls) -> CapabilityReport:  # what the probe would have found
            return report

    return TestClaims()


PROBED = CapabilityReport(
    "dev",
    "probed",
    capabilities=tuple(Capability(n, n != "compile", f"why {n}") for n in CAPABILITIES),
)


def test_a_class_that_claims_nothing_has_no_capability_test() -> None:
    class TestNoClaims(accelctl.testing.AcceleratorConformance):
        accelerator = "dev"

    assert not hasattr(TestNoClaims, "test_capabilities")


def test_claims_that_hold_pass() -> None:
    _face({"bf16-autocast": True, "compile": False}, PROBED).test_capabilities()


def test_claims_that_do_not_hold_fail_naming_each_with_the_devices_reason() -> None:
    face = _face({"bf16-autocast": False, "compile": True, "ddp": True}, PROBED)
    with pytest.raises(accelctl.testing.ConformanceFailure) as failure:
        face.test_capabilities()
    assert str(failure.value) == (
        "capabilities: 2 of 3 expected capabilities differ:\n"
        "  bf16-autocast: expected no, the device says yes (why bf16-autocast)\n"
        "  compile: expected yes, the device says no (why compile)"
    )


def test_a_claim_the_matrix_has_no_row_for_fails_listing_the_rows() -> None:
    face = _face({"fsdp": True}, PROBED)
    with pytest.raises(accelctl.testing.ConformanceFailure, match="names 'fsdp', which the"):
        face.test_capabilities()


def test_claims_are_skipped_where_the_device_is_absent() -> None:
    absent = CapabilityReport("dev", "unavailable", reason="no dev hardware here")
    with pytest.raises(pytest.skip.Exception, match="needs the hardware: unavailable here: no"):
        _face({"ddp": True}, absent).test_capabilities()


def test_claims_fail_where_the_probe_failed() -> None:
    crashed = CapabilityReport("dev", "probe-failed", reason="the probe process was killed")
    with pytest.raises(accelctl.testing.ConformanceFailure, match="probe-failed: the probe"):
        _face({"ddp": True}, crashed).test_capabilities()


# -- probe processes ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_cpu_plugin_probed_in_a_process_of_its_own(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine without the C++ compiler DeepSpeed's host ops are built with.
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    result = cli("validate", "--capabilities", "cpu", "--json")
    assert result.exit_code == 0, result.output
    (cpu,) = strict_json(result.stdout)
    assert (cpu["state"], cpu["device"], cpu["distributed_backend"]) == ("probed", "cpu", "gloo")
    assert (cpu["passed"], cpu["problems"], cpu["fsdp"]) == (True, [], True)
    rows = {row["name"]: row for row in cpu["capabilities"]}
    assert list(rows) == list(CAPABILITIES)
    no = [name for name, row in rows.items() if not row["supported"]]
    assert no == ["memory-stats", "deepspeed-host-ops"]
    assert rows["ddp"]["reason"] == "DistributedDataParallel ran a step on a 1-process 'gloo' group"
    for collective in ("all-gather-into-tensor", "broadcast", "all-reduce"):
        assert rows[collective]["reason"].endswith("ran on a 1-process 'gloo' group")
    assert rows["deepspeed-device-ops"]["reason"].startswith("DeepSpeed's own CPU builds")
    assert "no C++ compiler ('/nonexistent/c++', from $CXX" in rows["deepspeed-host-ops"]["reason"]
    assert rows["compile"]["reason"] == (
        "inductor has a code generator registered for 'cpu', and torch.compile(backend='eager') ran"
    )
    # The CPU is the kernels' reference: every case runs as on it; the plugin declares nothing.
    kernels = rows["kernels"]
    assert (kernels["supported"], kernels["missing_kernels"]) == (True, [])
    assert kernels["kernel_gaps"] == KernelGaps().to_dict()
    assert kernels["kernel_cases"] == [case.name for case in CASES]


#: Hostile plugins for the probe processes: on the CPU, each breaks the first probe it meets
#: (bf16-autocast asks torch.amp.is_autocast_available) from its setup_device hook, after
#: writing to stdout both ways (the rows must still arrive intact).
@pytest.mark.slow
def test_a_probe_that_crashes_or_hangs_is_a_row_saying_so(fake_site: FakeSite) -> None:
    # Each writes noise on stdout, then crashes or hangs the probe (fakeplugins.probe_breakers).
    fake_site.install("acme-crashy", {"crashy": "fakeplugins.probe_breakers:CrashesWhenProbed"})
    fake_site.install("acme-hangy", {"hangy": "fakeplugins.probe_breakers:HangsWhenProbed"})
    # The hang guard of each probe; the start (importing torch) has its own, START_TIMEOUT_S.
    crashy, hangy = accelctl.testing.probe_installed(["crashy", "hangy"], timeout=3)
    assert crashy.state == hangy.state == "probe-failed"
    assert crashy.reason is not None and hangy.reason is not None
    assert crashy.reason.startswith(
        "the probe process was killed by SIGABRT while probing bf16-autocast"
    )
    assert hangy.reason.startswith(
        "the probe process did not answer within 3 s while probing bf16-autocast"
    )
    for report in (crashy, hangy):
        assert report.device == "cpu:0"
        assert [c.name for c in report.capabilities] == list(CAPABILITIES)
        assert not any(c.supported for c in report.capabilities)
        assert report.problems == (report.reason,)
        assert "noise from" in report.reason  # what it wrote went to its stderr

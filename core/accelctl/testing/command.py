"""``accelctl validate``: the conformance checks on installed accelerators.

The kit's command, not the core's: the CLI finds it through the entry point ``validate`` of the
group ``accelctl.commands`` (the root ``pyproject.toml``), as it finds any distribution's command,
so the core's CLI never imports the kit. It needs no pytest.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import traceback

import click

from accelctl._host.registry import get_registry
from accelctl.capabilities import Capability
from accelctl.cli._child import run_in_child
from accelctl.cli._output import echo_line, emit_json

from .checks import validate_installed
from .matrix import PROBE_TIMEOUT_S, CapabilityReport, probe_installed
from .results import ValidationReport


def _print_report(report: ValidationReport) -> None:
    plugin = " ".join(filter(None, [report.distribution, report.version]))
    echo_line(f"{report.name}" + (f" ({plugin})" if plugin else "") + f": {report.summary()}")
    if report.disabled:  # one line: no check ran
        return
    width = max(len(result.check) for result in report.checks)
    for (status, detail), group in itertools.groupby(report.checks, lambda r: (r.status, r.detail)):
        run = list(group)
        if status == "skip" and len(run) >= 3:  # one line for checks skipped for one reason
            span = f"{len(run)} checks, {run[0].check} to {run[-1].check}"
            echo_line(f"  SKIP  {span}: {detail}")
        else:
            for each in run:
                echo_line(f"  {each.status.upper()}  {each.check.ljust(width)}  {each.detail}")


def _portable(reports: list[ValidationReport]) -> list[ValidationReport]:
    """Return the reports with each failure's error as its traceback's text.

    A plugin's exception may not survive the way from the process that checked it."""
    return [
        dataclasses.replace(
            report,
            checks=tuple(
                result
                if result.error is None
                else dataclasses.replace(result, error=TracebackText(result.error))
                for result in report.checks
            ),
        )
        for report in reports
    ]


class TracebackText(Exception):
    """An exception raised in another process, as the text of its traceback."""

    def __init__(self, error: BaseException | str) -> None:
        text = error if isinstance(error, str) else "".join(traceback.format_exception(error))
        super().__init__(text)
        self.text = text


def _print_tracebacks(reports: list[ValidationReport]) -> None:
    for report in reports:
        for result in report.failures:
            if result.error is not None:
                click.echo(f"--- {report.name}: {result.check} ---", err=True)
                if isinstance(result.error, TracebackText):
                    click.echo(result.error.text.rstrip("\n"), err=True)
                else:
                    traceback.print_exception(result.error, file=sys.stderr)


def _print_capabilities(report: CapabilityReport) -> None:
    plugin = " ".join(filter(None, [report.distribution, report.version]))
    title = f"{report.name}" + (f" ({plugin})" if plugin else "")
    if not report.capabilities:
        echo_line(f"{title}: {report.state}: {report.reason}")
        return
    backend = report.distributed_backend or "none"
    gaps = report.fsdp_gaps
    if gaps is None:  # the probe process failed part-way: its problem is the last line
        fsdp = "the probe did not finish"
    elif gaps:
        fsdp = f"FSDP2 lacks {', '.join(gap.name for gap in gaps)}"
    else:
        fsdp = "FSDP2 can be tried"
    echo_line(f"{title} on {report.device}, distributed backend {backend}: {fsdp}")
    width = max(len(capability.name) for capability in report.capabilities)
    for capability in report.capabilities:
        answer = "yes" if capability.supported else "no "
        echo_line(f"  {answer}  {capability.name.ljust(width)}  {capability.reason}")
        if capability.name == "kernels":
            _print_kernels(capability, indent=" " * (width + 9))
    for problem in report.problems:
        echo_line(f"  PROBLEM  {problem}")


def _print_kernels(row: Capability, indent: str) -> None:
    """Under the ``kernels`` row: a line per kernel missing, and what the plugin declares."""
    for found in row.missing_kernels:
        kernel = f" ({found.kernel})" if found.kernel else ""
        fallback = "yes" if found.fallback else f"no: {found.why_no_fallback}"
        echo_line(
            f"{indent}{found.op} {found.phase}{kernel}: {found.state} in "
            f"{', '.join(found.cases)}: {found.seen}; ACCELCTL_CPU_FALLBACK=1 runs it on the "
            f"CPU: {fallback}"
        )
    gaps = row.kernel_gaps
    if gaps is not None and (
        gaps.missing or gaps.partial or gaps.never_fall_back or gaps.fallback_variable
    ):
        declared = [f"missing {', '.join(gaps.missing)}"] if gaps.missing else []
        if gaps.partial:
            declared.append(f"some dtypes only {', '.join(gaps.partial)}")
        if gaps.never_fall_back:
            declared.append(f"never on the CPU {', '.join(gaps.never_fall_back)}")
        if gaps.fallback_variable:
            declared.append(f"torch's own switch {gaps.fallback_variable}")
        note = f" ({gaps.note})" if gaps.note else ""
        echo_line(f"{indent}the plugin declares (kernel_gaps): {'; '.join(declared)}{note}")


def _capabilities(names: tuple[str, ...], as_json: bool, timeout: float) -> bool:
    """Print the capability matrix; True when no report has a problem."""
    reports = probe_installed(names or None, timeout=timeout)
    if as_json:
        emit_json([report.to_dict() for report in reports])
    else:
        for index, report in enumerate(reports):
            if index:
                click.echo("")
            _print_capabilities(report)
        probed = [r.name for r in reports if r.capabilities]
        others = [f"{r.name} ({r.state})" for r in reports if not r.capabilities]
        failed = [r.name for r in reports if r.problems]
        click.echo("")
        line = f"{len(probed)} accelerator(s) probed"
        line += f"; not probed: {', '.join(others)}" if others else ""
        line += f"; problems: {', '.join(failed)}" if failed else ""
        echo_line(line)
    return all(report.passed for report in reports)


def _nothing_installed(ctx: click.Context) -> None:
    click.echo(
        "error: no accelerator plugin is installed, so there is nothing to validate; "
        "install one (pip install accelctl-cpu) or name one",
        err=True,
    )
    ctx.exit(1)


@click.command("validate")
@click.argument("names", nargs=-1, metavar="[NAME ...]")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array (one object per plugin).")
@click.option(
    "--capabilities",
    is_flag=True,
    help="Probe what each available device can do for training (autocast, DDP, FSDP2's and "
    "ZeRO's needs, RNG state, memory figures, torch.compile, DeepSpeed's ops, kernels), each "
    "plugin in a fresh process.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help=f"With --capabilities: seconds each probe may take (default {PROBE_TIMEOUT_S:g}).",
)
@click.pass_context
def validate_command(
    ctx: click.Context,
    names: tuple[str, ...],
    as_json: bool,
    capabilities: bool,
    timeout: float | None,
) -> None:
    """Run the conformance checks on the named accelerators (default: every installed one).

    One line per check: PASS, FAIL with the reason, or SKIP with why (a check that needs
    hardware that is absent here is skipped). Plugins disabled by ACCELCTL_PLUGINS or
    ACCELCTL_DISABLE are skipped unless named. Exits 0 when no check fails, 1 otherwise.

    With --capabilities, the capability matrix instead: per available accelerator, each
    capability yes or no with the reason. A missing capability is not a failure: the exit
    status is 1 only for a broken plugin, a probe that crashed or hung, or a plugin that
    declares a distributed backend on which DDP fails.
    """
    if timeout is not None and not capabilities:
        raise click.UsageError("--timeout goes with --capabilities")
    if capabilities:
        if not names and not get_registry().names():
            _nothing_installed(ctx)
        if not _capabilities(names, as_json, PROBE_TIMEOUT_S if timeout is None else timeout):
            ctx.exit(1)
        return
    # The plugins are checked in a process of their own (accelctl.cli._child).
    [reports] = run_in_child(lambda: iter([_portable(validate_installed(names or None))]))
    if not reports:
        _nothing_installed(ctx)
    if as_json:
        emit_json([report.to_dict() for report in reports])
    else:
        for index, report in enumerate(reports):
            if index:
                click.echo("")
            _print_report(report)
        validated = [report for report in reports if not report.disabled]
        failed = [report.name for report in validated if not report.passed]
        disabled = [report.name for report in reports if report.disabled]
        click.echo("")
        verdict = f"failed: {', '.join(failed)}" if failed else "all passed"
        line = f"{len(validated)} accelerator(s) validated, {verdict}" if validated else ""
        if disabled:
            line += ("; " if line else "") + f"disabled, not validated: {', '.join(disabled)}"
        echo_line(line)
    if ctx.find_root().params.get("debug"):
        _print_tracebacks(reports)
    if not all(report.passed for report in reports):
        ctx.exit(1)

"""``accelctl validate``: the conformance checks on installed accelerators.

The kit's command, not the core's: the CLI finds it through the entry point ``validate`` of the
group ``accelctl.commands`` (the root ``pyproject.toml``), as it finds any distribution's command,
so the core's CLI never imports the kit. It needs no pytest.
"""

from __future__ import annotations

import itertools
import sys
import traceback

import click

from accelctl.cli._output import echo_line, emit_json

from .checks import validate_installed
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


def _print_tracebacks(reports: list[ValidationReport]) -> None:
    for report in reports:
        for result in report.failures:
            if result.error is not None:
                click.echo(f"--- {report.name}: {result.check} ---", err=True)
                traceback.print_exception(result.error, file=sys.stderr)


@click.command("validate")
@click.argument("names", nargs=-1, metavar="[NAME ...]")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array (one object per plugin).")
@click.pass_context
def validate_command(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Run the conformance checks on the named accelerators (default: every installed one).

    One line per check: PASS, FAIL with the reason, or SKIP with why (a check that needs
    hardware that is absent here is skipped). Plugins disabled by ACCELCTL_PLUGINS or
    ACCELCTL_DISABLE are skipped unless named. Exits 0 when no check fails, 1 otherwise.
    """
    reports = validate_installed(names or None)
    if not reports:
        click.echo(
            "error: no accelerator plugin is installed, so there is nothing to validate; "
            "install one (pip install accelctl-cpu) or name one",
            err=True,
        )
        ctx.exit(1)
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

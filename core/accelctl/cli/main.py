"""The ``accelctl`` group: lazy sub-commands, ``--debug``, ``--version`` and one-line errors.

Sub-command modules are imported only when their command runs (or ``--help`` lists them), so
``accelctl list`` pays for nothing but itself. Commands that distributions add (``validate``, the
conformance kit's, among them) come from the entry-point group ``accelctl.commands``, read only
for a name that is not built in and for the ``--help`` listing (:mod:`accelctl.cli._contributed`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any

import click

from .._base.text import one_line, quote, safe_str
from .._base.wording import on_command_line
from .._contract.errors import AccelctlError, PluginWarning
from .._host.fanout import abandoned_threads

if TYPE_CHECKING:
    from ._contributed import Contributed

#: The core's own commands: name -> "module:attribute" of its click command. Other packages add
#: commands through the entry-point group ``accelctl.commands`` instead.
COMMANDS: dict[str, str] = {
    "list": "accelctl.cli.list_cmd:list_command",
    "launch": "accelctl.cli.launch_cmd:launch_command",
    "resolve": "accelctl.cli.resolve_cmd:resolve_command",
    "new-plugin": "accelctl.cli.new_plugin_cmd:new_plugin_command",
    "stats": "accelctl.cli.stats_cmd:stats_command",
    "env": "accelctl.cli.env_cmd:env_command",
    "plot": "accelctl.cli.plot_cmd:plot_command",
}

_CONTRIBUTED = "accelctl contributed commands"  # the scan's key in the context's meta


class AccelctlGroup(click.Group):
    """A click group that imports sub-commands on demand and shows errors as one line.

    It also adds the commands installed distributions contribute. The line goes to stderr with
    exit status 1 (``--debug``: the traceback too)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        contributed = _contributed(ctx).names()
        return sorted(set(COMMANDS) | set(self.commands) | set(contributed))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return self.commands.get(cmd_name) or _contributed(ctx).command(cmd_name)
        module_name, _, attribute = target.partition(":")
        command: click.Command = getattr(importlib.import_module(module_name), attribute)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # click suggests a near name only among the commands registered eagerly (none here).
        name = click.utils.make_str(args[0])
        if ctx.resilient_parsing or name.startswith("-") or self.get_command(ctx, name):
            return super().resolve_command(ctx, args)
        import difflib  # a mistyped command only: difflib and heapq cost every start ~4 ms

        close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
        hint = f" Did you mean {quote(close[0])}?" if close else ""
        raise click.UsageError(f"No such command {quote(name)}.{hint}", ctx)

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))
        # list, stats, env and resolve ask the plugins in a process of their own (_child.py).
        with warnings.catch_warnings():
            default_show = warnings.showwarning

            def show(
                message: Warning | str,
                category: type[Warning],
                filename: str,
                lineno: int,
                file: Any = None,
                line: str | None = None,
            ) -> None:
                text = one_line(safe_str(message))  # may be a plugin's: escaped, bounded
                if issubclass(category, PluginWarning):  # ours: one plain line
                    click.echo(f"warning: {text}", err=True)
                else:
                    default_show(text, category, filename, lineno, file, line)

            warnings.showwarning = show
            try:
                with on_command_line():  # messages name flags, not keyword arguments
                    return super().invoke(ctx)
            except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
                raise
            except BrokenPipeError:  # the reader went away (`| head`): click ends quietly, exit 1
                raise
            except AccelctlError as exc:
                _fail(exc, debug, prefix="error")
            except Exception as exc:  # a bug, ours or a plugin's: still one line without --debug
                _fail(exc, debug, prefix=f"internal error ({type(exc).__name__})")


def _contributed(ctx: click.Context) -> Contributed:
    """The contributed commands, scanned once per command line (``--help`` asks for each)."""
    found: Contributed | None = ctx.meta.get(_CONTRIBUTED)
    if found is None:
        from ._contributed import Contributed

        found = ctx.meta[_CONTRIBUTED] = Contributed(builtins=COMMANDS)
        for line in found.warnings:
            click.echo(f"warning: {one_line(line)}", err=True)
    return found


def _fail(exc: BaseException, debug: bool, prefix: str) -> None:
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    message = one_line(exc)  # plugins' and users' text in it: escaped, bounded
    hint = "" if debug else " (run with --debug for the traceback)"
    click.echo(f"{prefix}: {message}" + (hint if prefix != "error" else ""), err=True)
    sys.exit(1)


@click.group(cls=AccelctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.version_option(package_name="accelctl", prog_name="accelctl")
def cli(debug: bool) -> None:
    """Pluggable hardware accelerators for PyTorch training.

    Every accelerator (cpu, cuda, mps, or a vendor's) is a pip-installable plugin found through
    the entry-point group "accelctl.accelerators".
    """


def main() -> None:
    """Run the CLI: the console-script entry point.

    Ends with ``os._exit`` (output flushed) where a plugin's thread left running past its deadline,
    or a non-daemon one, would hold up the interpreter's exit.

    A command whose plugins were asked in a child (``list``, ``stats``, ``env``, ``resolve``)
    freezes the garbage collector's objects once it is done: the interpreter's shutdown would
    otherwise walk every object the imports made, a fifth of ``accelctl list``'s time (issue
    48). No plugin code ran in this process, so no plugin's object waits there for a finalizer;
    ``atexit`` handlers, the streams' flush and ``SystemExit`` are as before."""
    try:
        cli(prog_name="accelctl")
    except SystemExit as exc:
        main_thread = threading.main_thread()
        lingering = [
            thread
            for thread in threading.enumerate()
            if thread is not main_thread and not thread.daemon and thread.is_alive()
        ]
        if abandoned_threads() or lingering:
            _exit_now(exc.code)
        child = sys.modules.get("accelctl.cli._child")  # imported by those commands alone
        if child is not None and child.asked_in_child:
            gc.freeze()
        raise


def _exit_now(code: object) -> None:
    if code is not None and not isinstance(code, int):
        click.echo(str(code), err=True)  # what sys.exit("message") would print
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream
            stream.flush()
    os._exit(code or 0)

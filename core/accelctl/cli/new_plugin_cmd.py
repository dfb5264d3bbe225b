"""``accelctl new-plugin``: a ready plugin package for a new accelerator."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from .._contract.errors import AccelctlError
from .._host.registry import get_registry
from ._scaffold import PluginNames, name_problem, write


def _check_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    problem = name_problem(value)
    if problem:
        raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


@click.command("new-plugin")
@click.argument("name", callback=_check_name)
@click.option(
    "--path",
    "-p",
    "parent",
    type=click.Path(exists=True, file_okay=False, writable=True, path_type=Path),
    default=".",
    show_default=True,
    help="Existing folder in which the package folder accelctl-NAME is created.",
)
def new_plugin_command(name: str, parent: Path) -> None:
    """Write a ready plugin package for a new accelerator called NAME.

    The package (accelctl-NAME) has a pyproject with the entry point, a plugin class (a subclass
    of accelctl.Accelerator) with the hooks to fill in written and documented, a README, and a
    test that runs the conformance suite. As generated it installs and passes `accelctl validate
    NAME`, saying "not detected" until its detect() is written. Nothing is overwritten.
    """
    installed = get_registry().claimants(name)
    if installed:
        dist = installed[0].distribution or "an unnamed distribution"
        raise AccelctlError(
            f"an accelerator named {name!r} is installed already (from {dist}); a second "
            "plugin of the same name would conflict with it: choose another name"
        )
    names = PluginNames.for_name(name)
    try:
        root, files = write(names, parent)
    except FileExistsError:
        folder = parent / names.distribution
        raise AccelctlError(
            f"{folder} exists already; nothing was written. Remove it, or choose another --path"
        ) from None
    except OSError as exc:
        raise AccelctlError(
            f"cannot write the package {names.distribution} into {parent}: "
            f"{exc.strerror or exc}; nothing was left behind. Choose another --path"
        ) from exc
    click.echo(f"created {root}/ for the accelerator {name!r}:")
    for path in files:
        click.echo(f"  {path.relative_to(root)}")
    click.echo("")
    click.echo("next:")
    # With its test extra (accelctl[testing], pytest): the `pytest` line below needs it.
    click.echo(f"  pip install -e {shlex.quote(f'{root}[test]')}")
    click.echo(f"  accelctl validate {name}")
    click.echo(f"  pytest {root / 'tests'}")
    click.echo(
        f"then teach {names.class_name}.detect() to find the hardware in "
        f"{root / 'src' / names.module / '__init__.py'}"
    )

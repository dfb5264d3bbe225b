"""Commands that installed distributions add to ``accelctl``.

The entry-point group ``accelctl.commands``, each entry point a command's name and ``"module:attr"``
of its click command, as llm and conda let plugins add commands::

    [project.entry-points."accelctl.commands"]
    hello = "acme_tools.cli:hello"

accelctl's own ``validate`` arrives this way (the conformance kit's command), so the core's CLI
never imports the kit. The group is read only when the CLI needs it: a name that is not a
built-in command, and the ``--help`` listing; a built-in command never pays for the scan. A
command that cannot be loaded, or whose name is claimed twice, never takes the CLI down: it is
still listed, and running it is a one-line error naming the distribution and the cause (exit 1).
A name that is a built-in command's is refused with a warning, never shadowing the built-in.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from importlib import metadata

import click

from .._base.text import describe_exception, one_line, quote
from .._contract.errors import AccelctlError
from .._host.discovery import COMMANDS_GROUP, Found, read_identity, scan


class Contributed:
    """The commands of the group ``accelctl.commands`` on ``path``, read once.

    ``path`` defaults to ``sys.path``. ``builtins`` are the CLI's own command names, which no
    distribution may take."""

    def __init__(self, builtins: Collection[str], path: Sequence[str] | None = None) -> None:
        claims: dict[str, list[Found]] = {}
        for found in scan(path, warn=False, groups=(COMMANDS_GROUP,)):
            claims.setdefault(found.name, []).append(found)
        #: One line per refused entry point (a built-in's name), for the CLI to print.
        self.warnings: list[str] = [
            f"{_describe(found)} is ignored: {quote(name)} is a built-in command of accelctl; "
            f"rename the entry point"
            for name in sorted(claims.keys() & set(builtins))
            for found in claims.pop(name)
        ]
        self._claims = claims
        self._loaded: dict[str, click.Command] = {}

    def names(self) -> list[str]:
        """The contributed commands' names, broken ones included."""
        return sorted(self._claims)

    def command(self, name: str) -> click.Command | None:
        """Return the click command named ``name``, loaded on first use, or None.

        A stand-in whose run is the one-line error when it cannot be loaded; None when no
        distribution adds it."""
        if name not in self._loaded:
            claims = self._claims.get(name)
            if not claims:
                return None
            self._loaded[name] = _load(name, claims)
        return self._loaded[name]


def _describe(found: Found) -> str:
    """``command 'hello' of acme-tools 1.0 (entry point acme_tools.cli:hello)``."""
    distribution, version, _ = read_identity(found.origin)
    who = " ".join(filter(None, [distribution, version])) or "an unnamed distribution"
    return f"command {quote(found.name)} of {who} (entry point {quote(found.value)})"


def _load(name: str, claims: list[Found]) -> click.Command:
    if len(claims) > 1:
        who = " and ".join(_describe(found) for found in claims)
        return _failing(name, f"{who} claim one name; uninstall one of them")
    found = claims[0]
    if found.problem is not None:
        message = f"{_describe(found)} cannot be loaded: {found.problem}"
        return _failing(name, message, found.problem.cause)
    distribution = read_identity(found.origin).distribution
    advice = f"reinstall or uninstall {distribution}" if distribution else "reinstall it"
    try:
        command = metadata.EntryPoint(found.name, found.value, found.group).load()
    except KeyboardInterrupt:  # a Ctrl-C (the CLI loads commands in its main thread)
        raise
    except BaseException as exc:  # whatever the module raised, its sys.exit() included
        message = f"{_describe(found)} failed to load: {describe_exception(exc)}; {advice}"
        return _failing(name, message, exc)
    if not isinstance(command, click.Command):
        kind = type(command).__name__
        message = f"{_describe(found)} is a {kind}, not a click command; {advice}"
        return _failing(name, message)
    return command


def _failing(name: str, message: str, cause: BaseException | None = None) -> click.Command:
    """Return a command that stands for one that cannot run.

    Listed, and its run (whatever the arguments, ``--help`` included) is ``message`` as the CLI's
    one-line error, exit 1."""

    def fail() -> None:
        raise AccelctlError(message) from cause

    return click.Command(
        name,
        callback=fail,
        help=f"Cannot run: {one_line(message)}",
        short_help="(cannot run: accelctl " + name + " says why)",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )

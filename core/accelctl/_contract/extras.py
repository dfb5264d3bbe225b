"""The error raised when an optional library a part of the core needs is not installed.

It says which extra installs the library, from an index and from a clone of accelctl."""

from __future__ import annotations

from .errors import AccelctlError


class ExtraMissingError(AccelctlError, ModuleNotFoundError):
    """An optional library is not installed.

    A :class:`ModuleNotFoundError` as any failed import is, and one of accelctl's errors, so that
    the CLI says it in one line (exit 1)."""


def extra_missing(
    what: str, library: str, extra: str, cause: ModuleNotFoundError
) -> ExtraMissingError:
    """Return the error saying which extra installs the missing ``library``.

    ``<what> needs <library> (<module> is missing): pip install 'accelctl[<extra>]' ...``,
    with the module that was missing as its ``name``; raise it ``from cause``."""
    missing = (cause.name or library).partition(".")[0]  # the package, not its submodule
    return ExtraMissingError(
        f"{what} needs {library} ({missing} is missing): pip install 'accelctl[{extra}]' "
        f"(in a clone of accelctl, from its folder: pip install -e '.[{extra}]')",
        name=missing,
    )

"""The error a bridge raises when its framework is not installed.

Which extra installs it, from an index and from a clone of accelctl (where ``pip install
'accelctl[...]'`` would look for accelctl itself on the index)."""

from __future__ import annotations


def framework_missing(
    bridge: str, framework: str, cause: ModuleNotFoundError
) -> ModuleNotFoundError:
    """Return the error saying which extra installs the bridge's missing ``framework``.

    ``accelctl.integrations.<bridge> needs <framework> (<module> is missing): pip install ...``,
    with the module that was missing as its ``name``; raise it ``from cause``."""
    return ModuleNotFoundError(
        f"accelctl.integrations.{bridge} needs {framework} ({cause.name} is missing): "
        f"pip install 'accelctl[{bridge}]' (in a clone of accelctl, from its folder: "
        f"pip install -e '.[{bridge}]')",
        name=cause.name,
    )

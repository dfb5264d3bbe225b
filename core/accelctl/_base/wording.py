"""Where a message is read: in a Python program (keyword arguments) or on a command line (flags).

accelctl's messages say what to change: ``accelerator="auto"`` to a Python program, ``--accelerator
auto`` to a shell user. Each message is written once, with :func:`setting`; the CLI says, for the
whole of its command, that its reader is on the command line (:func:`on_command_line`). A flag, not
a context variable: the CLI asks plugins from threads and forked children of its own, which must
word their messages for the same reader. The processes ``accelctl launch`` starts run a Python
script: they word them for Python.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager

_command_line = False


@contextmanager
def on_command_line() -> Iterator[None]:
    """Word messages for a command line while the block runs (the CLI's commands)."""
    global _command_line
    previous, _command_line = _command_line, True
    try:
        yield
    finally:
        _command_line = previous


def setting(name: str, value: object, *, shown: str | None = None) -> str:
    """Write an argument as the reader writes it, in Python or on a command line.

    ``accelerator="auto"`` in Python, ``--accelerator auto`` on a command line, which holds strings
    only (any other value is written for Python).

    :param shown: the value as Python shows it where not ``"<value>"`` (``repr`` of a devices
        spec, shortened).
    """
    if _command_line and isinstance(value, str):
        return f"--{name.replace('_', '-')} {shlex.quote(value.strip())}"
    if shown is None:
        shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return f"{name}={shown}"

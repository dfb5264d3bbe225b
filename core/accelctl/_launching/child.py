"""What runs inside each launched process, before and around the user's code.

Every child first ties its life to the launcher's
(:func:`accelctl._launching.supervision.die_with_launcher`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._contract import settings
from .._contract.errors import AccelctlError
from .._contract.kernel_error import MissingKernelError
from .ending import end_without_teardown
from .error_line import details, message_line, show_as_one_line
from .failures import ERROR_FILE_VARIABLE, ERROR_LINE, ERROR_PARTS
from .supervision import die_with_launcher


def run_script(argv: Sequence[str]) -> None:
    """Run ``argv[0]`` as ``__main__`` with ``argv[1:]`` as its arguments, as ``python`` does.

    Same ``sys.argv``, ``sys.path[0]`` the script's folder. Records an exception it raises
    in the file named by ``TORCHELASTIC_ERROR_FILE`` for the launcher's report."""
    import runpy

    from torch.distributed.elastic.multiprocessing.errors import record

    if not argv:
        raise SystemExit("usage: python -m accelctl.launcher SCRIPT [ARGS ...]")
    die_with_launcher()  # before the script: a SIGKILLed launcher takes its children along
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    error_file = os.environ.get(ERROR_FILE_VARIABLE)
    if error_file:
        # torch's record() writes on close, so a rank stopped before then could leave the
        # launcher's file empty: record into this process's own file, moved onto the launcher's
        # only once whole (docs/design/error-record-written-whole.md).
        os.environ[ERROR_FILE_VARIABLE] = f"{error_file}.{os.getpid()}.partial"
    try:
        record(runpy.run_path)(script, run_name="__main__")
    except SystemExit as exc:
        end_without_teardown(exc.code)
    except KeyboardInterrupt:
        # Ctrl-C, passed on by the launcher to every process: its one line says what stopped and
        # where the last checkpoint is, not a traceback per process.
        end_without_teardown(128 + signal.SIGINT)
    except AccelctlError as exc:
        # A refusal, a missing kernel, a run already being written: the launcher shows it once
        # for the launch (a missing kernel's ways out in its own command line's words), no
        # traceback per rank (ACCELCTL_DEBUG=1: the traceback too).
        if error_file:
            _add_parts(os.environ[ERROR_FILE_VARIABLE], exc)
            _publish(os.environ[ERROR_FILE_VARIABLE], error_file)
        if error_file:  # the launcher's line is the one: this process adds none of its own
            show_as_one_line(quiet=True)
        if settings.debug() or not error_file:
            raise
        for line in details(exc):  # what the message says beyond its first line (stacks)
            print(line, file=sys.stderr)
        end_without_teardown(1)
    except BaseException:  # a sys.exit() or Ctrl-C too: the launcher reads the record
        if error_file:
            _publish(os.environ[ERROR_FILE_VARIABLE], error_file)
        raise
    end_without_teardown(0)


def _add_parts(written: str, error: AccelctlError) -> None:
    """Add the error's line to the record torch wrote, for the launcher's one line.

    A missing kernel's parts too."""
    import json

    try:
        with open(written) as file:
            record = json.load(file)
        extra = record["message"]["extraInfo"]
        extra[ERROR_LINE] = message_line(error)
        if isinstance(error, MissingKernelError):
            extra[ERROR_PARTS] = error.parts()
        with open(written, "w") as file:
            json.dump(record, file)
    except (OSError, ValueError, KeyError, TypeError):  # no record: the launcher says less
        pass


def _publish(written: str, error_file: str) -> None:
    """Put the error record torch wrote at ``written`` in ``error_file``, whole, at once."""
    os.environ[ERROR_FILE_VARIABLE] = error_file
    with contextlib.suppress(FileNotFoundError):  # record() writes none for some exits
        os.replace(written, error_file)


def run_in_child(threads: int, function: Callable[..., Any], *args: Any) -> Any:
    """Run ``function(*args)`` in one process of :func:`accelctl.launch`.

    On ``threads`` CPU threads (0: as configured). A module-level function, so that ``spawn`` can
    pickle it."""
    die_with_launcher()
    if threads:
        import torch

        torch.set_num_threads(threads)
    return function(*args)

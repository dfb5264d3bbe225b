"""A missing kernel, wherever accelctl runs a user's model, becomes :class:`MissingKernelError`.

Each training path asks here once, where an error already stopped it (the Trainer's fit, a
bridge's step): nothing is asked while the model runs, so a step that raises nothing pays
nothing. An error that is not a missing kernel is left as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _settings
from .error import MissingKernelError
from .recognize import KernelFailure, calling_layer, phase_of, recognize, undefined_grad
from .setup import KernelSetup, setup_for

if TYPE_CHECKING:
    import torch


def missing_kernel_error(
    exc: BaseException,
    *,
    accelerator: str,
    device: torch.device | str,
    model: Any = None,
    loss: Any = None,
) -> MissingKernelError | None:
    """accelctl's error for ``exc`` where it is a kernel ``device`` lacks (see
    :mod:`.recognize` for the shapes), naming the layer of ``model`` that called it; None for
    any other error. ``loss``: the tensor whose backward raised, where it did (the autograd
    engine's error names no operator; the loss's graph does); None: the one the traceback
    shows, where it does. An error that already is a complete :class:`MissingKernelError` is
    returned as it is."""
    kind = str(device).split(":", 1)[0]
    if isinstance(exc, MissingKernelError):
        if exc.op is None or (exc.accelerator and exc.layer):
            return exc
        return MissingKernelError.from_parts(
            {
                **exc.parts(),
                "accelerator": exc.accelerator or accelerator,
                "layer": exc.layer or calling_layer(exc, model),
                "device": exc.device if exc.device and ":" in exc.device else str(device),
            }
        )
    failure = recognize(exc, kind)
    if failure is None:
        failure = undefined_grad(exc, loss)
    if failure is None:
        return None
    setup = setup_for(kind)
    return MissingKernelError(
        op=failure.op,
        kernel=failure.kernel,
        layer=calling_layer(exc, model),
        device=str(device),
        accelerator=accelerator,
        phase=failure.phase or phase_of(exc),
        fallback=_why_not(failure, setup, accelerator),
        switch=setup.switch if setup is not None else None,
    )


def _why_not(failure: KernelFailure, setup: KernelSetup | None, accelerator: str) -> str | None:
    """Why the CPU fallback cannot run ``failure``'s kernel; None where it can."""
    if failure.cpu_lacks_it:
        return "the CPU has no such kernel either"
    if setup is None:
        return None
    if not setup.gaps.allows_fallback(failure.kernel):
        return f"the plugin {accelerator} declares that it must never run there"
    if setup.unavailable is not None:
        return setup.unavailable
    if setup.fallback in ("accelctl", "torch"):
        return "it is on in this run, and could not run this operator"
    return None


def raise_missing_kernel(
    exc: BaseException,
    *,
    accelerator: str,
    device: torch.device | str,
    model: Any = None,
    loss: Any = None,
) -> None:
    """Raise :func:`missing_kernel_error`'s error from ``exc`` where there is one (and show it
    as one line should it end the program); return where ``exc`` is another error."""
    error = missing_kernel_error(
        exc, accelerator=accelerator, device=device, model=model, loss=loss
    )
    if error is None:
        return
    show_as_one_line()
    if error is exc:
        raise error
    raise error from exc


#: A function that finds the error a framework's own error carries (Ray's, from its workers).
Carrier = Callable[[BaseException], MissingKernelError | None]

#: What the one-line hook shows: nothing at all in a process whose launch shows the line in
#: another one, and the errors the carriers find.
_quiet = False
_carriers: list[Carrier] = []


def show_as_one_line(*, quiet: bool = False, carried: Carrier | None = None) -> None:
    """From now on, a :class:`MissingKernelError` that ends this program is shown as accelctl's
    one line on standard error, its ways out written as the command line that ran it
    (``ACCELCTL_DEBUG=1``: Python's traceback as well). Other errors are shown as before.

    :param quiet: from now on this process ends on one without a word: its launch shows the
        line in another process (the rank 0 of a launch Lightning made).
    :param carried: from now on, also the error this finds in a framework's own error (Ray's
        ``WorkerGroupError``, which carries its workers' errors); None where there is none.
    """
    global _quiet
    _quiet = _quiet or quiet
    if carried is not None and carried not in _carriers:
        _carriers.append(carried)
    previous = sys.excepthook
    if getattr(previous, "_accelctl_one_line", False):
        return

    def one_line(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        error = _shown(value)
        if error is None:
            previous(kind, value, tb)
            return
        if _settings.debug():
            previous(kind, value, tb)
        if not _quiet:
            sys.stderr.write(f"accelctl: {error.for_command(command_line())}\n")
            sys.stderr.flush()

    one_line._accelctl_one_line = True  # type: ignore[attr-defined]
    sys.excepthook = one_line


def _shown(value: BaseException) -> MissingKernelError | None:
    """The error the one line shows for ``value``; None where it shows none."""
    if isinstance(value, MissingKernelError):
        return value if value.op is not None else None
    for carrier in _carriers:
        try:
            found = carrier(value)
        except Exception:  # a carrier that breaks leaves Python's own report of the error
            found = None
        if found is not None and found.op is not None:
            return found
    return None


def command_line() -> list[str]:
    """The command line that started this process, as typed (``python train.py --epochs 3``)."""
    return list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])

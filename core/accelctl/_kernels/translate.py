"""A missing kernel, wherever accelctl runs a user's model, becomes :class:`MissingKernelError`.

Each training path asks here once, where an error already stopped it (the Trainer's fit, a
bridge's step): nothing is asked while the model runs, so a step that raises nothing pays
nothing. An error that is not a missing kernel is left as it is. Should the error end the
program, it is shown as accelctl's one line (:mod:`accelctl._launching.error_line`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._contract.kernel_error import MissingKernelError
from .._launching.error_line import show_as_one_line
from .recognize import (
    KernelFailure,
    calling_layer,
    partial_kernel,
    phase_of,
    recognize,
    undefined_grad,
)
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
    """Return accelctl's error where ``exc`` is a kernel ``device`` lacks; None otherwise.

    See :mod:`.recognize` for the shapes. The error names the layer of ``model`` that called it.
    ``loss``: the tensor whose backward raised, where it did (the autograd engine's error names no
    operator; the loss's graph does); None: the one the traceback shows, where it does. An error
    that already is a complete :class:`MissingKernelError` is returned as it is."""
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
    setup = setup_for(kind)
    if failure is None and setup is not None and kind != "cpu":
        failure = partial_kernel(exc, setup.gaps.partial)
    if failure is None:
        return None
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
    """Raise :func:`missing_kernel_error`'s error from ``exc`` where there is one.

    Shown as one line should it end the program; return where ``exc`` is another error."""
    error = missing_kernel_error(
        exc, accelerator=accelerator, device=device, model=model, loss=loss
    )
    if error is None:
        return
    show_as_one_line()
    if error is exc:
        raise error
    raise error from exc

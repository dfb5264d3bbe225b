"""Where the Accelerate bridge's training path meets a kernel the device lacks.

The prepared model's ``forward`` (:func:`translate_forward`), whose error becomes
:class:`accelctl.MissingKernelError` naming the layer; every other error passes unchanged.

Accelerate has no training loop of its own to catch an error in: the user's loop calls the
prepared model, then ``Accelerator.backward`` (which the bridge's ``Accelerator`` overrides for
the backward pass). The forward is wrapped where and as Accelerate wraps it for mixed precision:
a callable bound to the model as its ``forward`` attribute, so that ``copy.deepcopy`` binds it
to the copy and ``unwrap_model(keep_fp32_wrapper=False)`` unwinds it through ``__wrapped__``.
Nothing is asked of the error until one stopped the forward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import MethodType
from typing import TYPE_CHECKING, Any

from accelctl._kernels.translate import raise_missing_kernel

if TYPE_CHECKING:
    import torch


class TranslatedForward:
    """A model's ``forward`` that raises a missing kernel as :class:`accelctl.MissingKernelError`.

    Raised from the original, where it is a kernel ``device`` lacks, for plugin ``accelerator``."""

    __wrapped__: Callable[..., Any]  # set by functools.update_wrapper

    def __init__(self, forward: Callable[..., Any], accelerator: str, device: torch.device) -> None:
        functools.update_wrapper(self, forward)
        self.accelerator = accelerator
        self.device = device

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.__wrapped__(*args, **kwargs)
        except Exception as exc:
            import torch

            # Bound to the model, its first argument is the model: the layer's path is in it.
            model = args[0] if args and isinstance(args[0], torch.nn.Module) else None
            raise_missing_kernel(exc, accelerator=self.accelerator, device=self.device, model=model)
            raise


def translate_forward(model: torch.nn.Module, accelerator: str, device: torch.device) -> None:
    """Wrap ``model``'s ``forward`` in a :class:`TranslatedForward`, once.

    A model prepared again keeps its one wrapper."""
    forward = model.forward
    function = getattr(forward, "__func__", None)
    if isinstance(function if function is not None else forward, TranslatedForward):
        return
    if function is not None and getattr(forward, "__self__", None) is model:
        wrapped = TranslatedForward(function, accelerator, device)
        model.forward = MethodType(wrapped, model)
    else:  # a callable of its own (a hook's functools.partial): no model to name layers in
        model.forward = TranslatedForward(forward, accelerator, device)

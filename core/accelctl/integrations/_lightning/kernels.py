"""A kernel the device lacks, on Lightning's training path.

The steps of a strategy that runs on an accelctl accelerator raise
:class:`accelctl.MissingKernelError` (:func:`translate_steps`).

Lightning runs each step through a public method of the Trainer's strategy (``training_step``,
``validation_step``, ``test_step``, ``predict_step``, ``backward``), looked up on the strategy
object at every call. :meth:`LightningAccelerator.setup
<accelctl.integrations.lightning.LightningAccelerator.setup>` gives that object a translating
wrapper of each, as its own attributes: no class of Lightning's changes, and nothing is asked
of an error until one stopped a step. (Lightning's ``Callback.on_exception`` sees the error
too, but Lightning re-raises the error it caught, so a callback cannot make ``Trainer.fit``
raise accelctl's.)
"""

from __future__ import annotations

from typing import Any

from accelctl import AccelctlError, MissingKernelError
from accelctl._kernels.translate import missing_kernel_error
from accelctl._launching.error_line import show_as_one_line

#: The strategy's methods that run the model: its steps, and the backward pass.
STEPS = ("training_step", "validation_step", "test_step", "predict_step", "backward")
#: How a Lightning user trains on the CPU: the accelerator is the Trainer's argument.
CPU_WAY = 'pass accelerator="cpu" to lightning.Trainer'


class TranslatedStep:
    """A strategy's step that raises a missing kernel as :class:`accelctl.MissingKernelError`.

    Raised from the original, for plugin ``accelerator``. That one, and any accelctl error, is shown
    as rank 0's one line should it end the program."""

    def __init__(self, strategy: Any, name: str, accelerator: str) -> None:
        self.strategy, self.name, self.accelerator = strategy, name, accelerator
        self.step = getattr(strategy, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.step(*args, **kwargs)
        except Exception as exc:
            error = self.missing_kernel(exc, args)
            if error is None and not isinstance(exc, AccelctlError):
                raise
            # Every process raises it; the one line is rank 0's, for the whole launch (under
            # accelctl launch, the launcher's).
            show_as_one_line(quiet=self.strategy.global_rank != 0)
            if error is None or error is exc:
                raise
            raise error from exc

    def missing_kernel(self, exc: Exception, args: tuple[Any, ...]) -> MissingKernelError | None:
        """Return accelctl's error for ``exc`` in Lightning's words, or None.

        Its way to the CPU too; None where ``exc`` is another error."""
        loss = args[0] if self.name == "backward" and args else None
        error = missing_kernel_error(
            exc,
            accelerator=self.accelerator,
            device=self.strategy.root_device,
            model=self.strategy.lightning_module,
            loss=loss,
        )
        if error is None or error.op is None or error.cpu_way is not None:
            return error
        return MissingKernelError.from_parts({**error.parts(), "cpu_way": CPU_WAY})


def translate_steps(strategy: Any, accelerator: str) -> None:
    """Give ``strategy`` a :class:`TranslatedStep` of each of its steps, once.

    The steps are :data:`STEPS`. A strategy set up again keeps its wrappers."""
    for name in STEPS:
        if not isinstance(getattr(strategy, name), TranslatedStep):
            setattr(strategy, name, TranslatedStep(strategy, name, accelerator))

"""The accelctl plugin's device figures in transformers' logs.

:class:`DeviceStatsCallback`, and :func:`add_device_stats`, which puts it where every reporting
integration sees its figures.

transformers calls ``on_log`` of its callbacks in their order with one ``logs`` dict, and adds
the callbacks of ``report_to`` (TensorBoard, W&B, MLflow, ...) before those passed as
``Trainer(callbacks=...)``: a callback given there adds its figures after the reporting
integrations have written theirs. :func:`add_device_stats` puts it first (through the
``Trainer``'s public ``callback_handler``). Either way its figures join the line of
``trainer.state.log_history`` that transformers had just appended, and what the callbacks after it
print (the progress bar, ``PrinterCallback``).
"""

from __future__ import annotations

from typing import Any

import transformers

import accelctl
from accelctl._choice.selection import known_name, select_accelerator
from accelctl._contract.errors import PluginWarning, warn_user

__all__ = ["DEFAULT_PREFIX", "DeviceStatsCallback", "add_device_stats"]

#: What the callback puts before each ``device_stats`` key in the logs.
DEFAULT_PREFIX = "device/"


class DeviceStatsCallback(transformers.TrainerCallback):  # type: ignore[misc]  # Any to mypy
    """Adds the device's figures to every log of transformers' ``Trainer``.

    Each ``device_stats`` key (docs/concepts.md section 7), ``prefix`` before it
    (``device/memory_allocated_bytes``), read from this process's device (``args.device``) by its
    accelctl plugin when the ``Trainer`` logs.

    :param accelerator: the accelctl accelerator that reads the device: a name, an alias or a
        plugin object. Default: the accelerator of accelctl's ``TrainingArguments``
        (:mod:`accelctl.integrations.transformers`), else the accelerator named as the device's
        type (``"cuda"`` for ``cuda:0``).
    :param prefix: put before each key (``""``: none).

    A plugin that cannot be found, or whose ``device_stats`` fails, is warned about once
    (:class:`accelctl.PluginWarning`) and not asked again during that training; the training
    goes on, its logs without the figures.
    """

    def __init__(
        self, accelerator: str | accelctl.Accelerator | None = None, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self.accelerator = accelerator
        self.prefix = prefix
        self._handle: accelctl.AcceleratorHandle | None = None
        self._off = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Find the plugin again for each training (the arguments may have changed)."""
        self._handle, self._off = None, False

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Add the device's figures to ``logs`` and to their line of ``state.log_history``.

        The line is the one transformers appended for ``logs``."""
        if not logs:
            return
        figures = {f"{self.prefix}{key}": value for key, value in self.read(args).items()}
        if not figures:
            return
        history = state.log_history
        # transformers appends {**logs, "step": ...} just before on_log: the same values.
        if history and all(history[-1].get(key) is value for key, value in logs.items()):
            history[-1].update(figures)
        logs.update(figures)

    def read(self, args: Any) -> dict[str, int | float]:
        """The figures of ``args.device`` now (``{}`` once the plugin failed)."""
        if self._off:
            return {}
        try:
            handle = self._handle = self._handle or self._find(args)
            return dict(handle.device_stats(args.device))
        except accelctl.AccelctlError as exc:
            self._off = True
            who = known_name(self._handle) if self._handle is not None else "accelctl"
            warn_user(
                f"device figures of {args.device} ({who}) left out of transformers' logs for "
                f"this training: {exc}",
                PluginWarning,
            )
            return {}

    def _find(self, args: Any) -> accelctl.AcceleratorHandle:
        if self.accelerator is not None:
            return select_accelerator(self.accelerator)
        handle: accelctl.AcceleratorHandle | None = getattr(args, "accelctl_accelerator", None)
        return handle if handle is not None else select_accelerator(args.device.type)


def add_device_stats(
    trainer: Any,
    accelerator: str | accelctl.Accelerator | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> DeviceStatsCallback:
    """Put a :class:`DeviceStatsCallback` first among ``trainer``'s callbacks and return it.

    Every reporting integration (``report_to``: TensorBoard, W&B, MLflow, ...) then logs its
    figures. ``trainer`` is a ``transformers.Trainer``."""
    callback = DeviceStatsCallback(accelerator, prefix)
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback

""":class:`MissingKernelError`, and its one line in the form of each place that shows it.

The ways out are written as the reader would type them: keywords and variables in Python
(``str(error)``), the user's own command line prefixed with a variable where a script's uncaught
error is shown (:meth:`MissingKernelError.for_command`), and ``accelctl launch`` options where
the launcher shows a rank's (:meth:`MissingKernelError.for_launch`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from .._base.text import LINE_LIMIT, clean
from . import settings
from .errors import AccelctlError

#: The switch that runs the kernels a device lacks on the CPU.
FALLBACK_SWITCH = f"{settings.CPU_FALLBACK}=1"
#: The switch that shows the traceback behind accelctl's one line.
DEBUG_SWITCH = f"{settings.DEBUG}=1"

#: The structured parts, in the order the constructor and the launcher's record take them.
_FIELDS = (
    "op", "kernel", "layer", "device", "accelerator", "phase", "fallback", "switch", "cpu_way",
)  # fmt: skip


class MissingKernelError(AccelctlError, NotImplementedError):
    """The device has no kernel for an operator the model called (or only a placeholder).

    ``str(error)`` is one line: the operator as a user knows it (``aten::convolution``), the
    layer that called it where accelctl could tell (``Conv2d at features.0``), the device and
    its plugin, and the ways out: train on the CPU, or run the kernels the device lacks on the
    CPU with ``ACCELCTL_CPU_FALLBACK=1`` (where that can run this one). A
    ``NotImplementedError``, as torch's own error for a missing kernel is; ``__cause__`` is the
    error torch raised, where there was one.

    Every part is an optional keyword, as for accelctl's other errors, so a plugin raises it
    from a message alone, or from the parts:

    :param op: the operator a user knows (``"aten::convolution"``).
    :param kernel: torch's name of the kernel that is missing, where it differs
        (``"aten::convolution_overrideable"``).
    :param layer: the layer that called it (``"Conv2d at features.0"``); None: not known.
    :param device: the device (``"openreg:0"``).
    :param accelerator: the accelctl plugin serving it (``"privateuse1"``).
    :param phase: ``"forward"`` or ``"backward"``; None: not known.
    :param fallback: None where ``ACCELCTL_CPU_FALLBACK=1`` can run the kernel on the CPU;
        else why it cannot (``"the CPU has no such kernel either"``).
    :param switch: the variable setting that runs the device's missing kernels on the CPU, where
        it is torch's own (``"PYTORCH_ENABLE_MPS_FALLBACK=1"``); None: ``ACCELCTL_CPU_FALLBACK=1``.
    :param cpu_way: how this program trains on the CPU where a framework takes the accelerator
        as an argument (``'pass accelerator="cpu" to lightning.Trainer'``); None: accelctl's own
        choice (``accelerator="cpu"``, ``ACCELCTL_ACCELERATOR=cpu``, ``accelctl launch --cpu``).
    """

    __module__ = "accelctl"  # its public home, as tracebacks and pickles name it

    def __init__(
        self,
        message: str = "",
        *,
        op: str | None = None,
        kernel: str | None = None,
        layer: str | None = None,
        device: str | None = None,
        accelerator: str | None = None,
        phase: str | None = None,
        fallback: str | None = None,
        switch: str | None = None,
        cpu_way: str | None = None,
    ) -> None:
        self.op, self.kernel, self.layer = op, kernel or op, layer
        self.device, self.accelerator, self.phase = device, accelerator, phase
        self.fallback = fallback
        self.switch = switch or FALLBACK_SWITCH
        self.cpu_way = cpu_way
        super().__init__(message or self._line(self._python_ways()))

    def __reduce__(self) -> tuple[Any, ...]:
        # The parts are keywords: the default reduction (the message alone) would lose them.
        return (_rebuild, (str(self), self.parts()))

    def parts(self) -> dict[str, str | None]:
        """The structured parts as plain data (a launched rank hands them to its launcher)."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_parts(cls, parts: Mapping[str, Any], message: str = "") -> MissingKernelError:
        """The error :meth:`parts` described (unknown keys are ignored: another version's)."""
        known = {name: parts.get(name) for name in _FIELDS}
        return cls(message, **{k: None if v is None else str(v) for k, v in known.items()})

    def for_command(self, argv: Sequence[str]) -> str:
        """Return the line shown to a script's user who ran ``argv``.

        ``argv`` is the command line, e.g. ``["python", "train.py"]``: the ways out are that command
        line with a variable before it (the CPU's: :attr:`cpu_way` where the error has one)."""
        command = clean(shlex.join(argv), LINE_LIMIT // 4)  # one line, even for `python -c`
        on_cpu = self.cpu_way or f"{settings.ACCELERATOR}=cpu {command}"
        return self._line((on_cpu, f"{self.switch} {command}"), debug=True)

    def for_launch(self, on_cpu: str, as_launched: str) -> str:
        """Return the line ``accelctl launch`` shows for a rank's error.

        ``on_cpu`` is the launch line with ``--cpu`` (:attr:`cpu_way` in its place where the error
        has one), ``as_launched`` the line the user ran."""
        return self._line((self.cpu_way or on_cpu, f"{self.switch} {as_launched}"), debug=True)

    def _python_ways(self) -> tuple[str, str]:
        return (
            self.cpu_way or f'pass accelerator="cpu" (or set {settings.ACCELERATOR}=cpu)',
            f"set {self.switch} in the environment",
        )

    def _line(self, ways: tuple[str, str], *, debug: bool = False) -> str:
        if self.op is None:  # made from a message alone: nothing to compose
            return str(self.args[0]) if self.args else "a kernel is missing"
        what = f"{self.op} has no kernel for {self.device or 'this device'}"
        if self.accelerator:
            what += f" (plugin {self.accelerator})"
        if self.layer:
            what += f", called by {self.layer}"
        if self.phase == "backward":
            what += " in the backward pass"
        on_cpu, fallback = ways
        if self.fallback is None:
            line = (
                f"{what}: to train on the CPU, {on_cpu}; to run the kernels the device lacks on "
                f"the CPU, {fallback}"
            )
        else:
            line = f"{what}: to train on the CPU, {on_cpu} ({self.switch} cannot run it: "
            line += f"{self.fallback})"
        return f"{line} ({DEBUG_SWITCH} shows the traceback)" if debug else line


def _rebuild(message: str, parts: Mapping[str, Any]) -> MissingKernelError:
    return MissingKernelError.from_parts(parts, message)

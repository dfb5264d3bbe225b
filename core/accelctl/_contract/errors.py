"""Every error accelctl raises, all under :class:`AccelctlError`.

Messages teach what was asked, what exists and what to do next. Each class takes a message alone, so
a plugin raises them as it would a builtin; the structured parts (``name``, ``spec``, ...) are
optional keywords."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from types import FrameType


class AccelctlError(Exception):
    """Base class of accelctl's errors."""


class UnknownAcceleratorError(AccelctlError, LookupError):
    """No installed plugin provides the accelerator asked for."""

    def __init__(
        self, message: str = "", *, name: str | None = None, installed: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.name = name
        self.installed = tuple(installed)


class AcceleratorUnavailableError(AccelctlError):
    """The accelerator is installed but cannot be used here (not detected, or disabled)."""

    def __init__(
        self, message: str = "", *, name: str | None = None, reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason


class AcceleratorTypeError(AccelctlError, TypeError):
    """An ``accelerator`` argument of a type that accelctl does not take.

    A ``torch.device``, None, a number, a list: the message says what is accepted."""


def fresh_copy(error: AccelctlError, message: str | None = None) -> AccelctlError:
    """Return a new error of the same class and parts as ``error``.

    Optionally with another message: an error kept is raised anew each time (``from error``), never
    edited in place."""
    copied = type(error)(str(error) if message is None else message)
    copied.__dict__.update(error.__dict__)
    return copied


class PluginLoadError(AccelctlError):
    """A plugin failed to import or broke the contract; ``__cause__`` holds the original error."""

    def __init__(
        self, message: str = "", *, name: str | None = None, distribution: str | None = None
    ) -> None:
        super().__init__(message)
        self.name = name
        self.distribution = distribution


class PluginHookError(AccelctlError):
    """A plugin's hook raised, returned what its specification does not allow, or did not answer.

    Not answering counts where accelctl asks many plugins at once, with a deadline. The plugin
    loaded: this is not a :class:`PluginLoadError`."""

    def __init__(
        self,
        message: str = "",
        *,
        name: str | None = None,
        hook: str | None = None,
        distribution: str | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.hook = hook
        self.distribution = distribution


class PluginConflictError(PluginLoadError):
    """Two distributions claim the same accelerator name (or alias)."""

    def __init__(
        self, message: str = "", *, name: str | None = None, distributions: Sequence[str] = ()
    ) -> None:
        super().__init__(message, name=name, distribution=None)
        self.distributions = tuple(distributions)


class DeviceSpecError(AccelctlError, ValueError):
    """A devices spec that the accelerator does not accept.

    The message names the accelerator, the spec, what is visible and the accepted forms, all kept as
    attributes too."""

    def __init__(
        self,
        message: str = "",
        *,
        accelerator: str | None = None,
        spec: object = None,
        visible: int | None = None,
        accepted: str = "",
    ) -> None:
        super().__init__(message)
        self.accelerator = accelerator
        self.spec = spec
        self.visible = visible
        self.accepted = accepted


class LaunchError(AccelctlError):
    """The processes could not be started as asked (bad multi-machine options, say)."""


class DataLoaderError(AccelctlError, TypeError):
    """A data loader the Trainer cannot shard across processes."""


class PrecisionError(AccelctlError, ValueError):
    """A ``precision`` the Trainer does not accept, or one the device cannot run."""


class ProcessSetupError(AccelctlError):
    """The devices asked for do not fit the processes that run.

    Several devices outside a launcher, or a launcher that started another number of processes."""


class TrainerError(AccelctlError, ValueError):
    """A Trainer argument, or a model that does not follow the Trainer's protocol."""


class FrameworkVersionError(AccelctlError, ImportError):
    """The installed release of a framework is one its accelctl bridge cannot run on.

    Without a name the bridge uses (or with its signature changed), or failing to import at all;
    never for its version number alone. Raised when the bridge is imported, before any process
    starts; the message is one line naming what is wrong, the window of releases tested and the line
    that installs one."""


class PluginWarning(UserWarning):
    """Emitted when a broken plugin is skipped (by ``resolve("auto")``, say): never silently."""


class CPUFallbackWarning(UserWarning):
    """An operator runs on the CPU in place of a kernel the device lacks, or cannot.

    Emitted once per operator that ``ACCELCTL_CPU_FALLBACK=1`` sends to the CPU, and where
    that switch can do nothing on the device.
    """


#: The folder of accelctl's own modules: frames there are never the user's line.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_user(
    message: str, category: type[Warning] = UserWarning, *, also_skip: tuple[str, ...] = ()
) -> None:
    """Warn, attributed to the first caller outside accelctl.

    The user's line that led here, however many of accelctl's frames lie between: Python
    3.12's ``skip_file_prefixes`` (before 3.12, the same rule written here, :func:`_walked`).
    A fixed ``stacklevel`` points at accelctl's own code as soon as the warning is reached
    through another path (``resolve`` or a ``Trainer``). In a thread of accelctl's own there is
    no user's line: the thread's first frame outside it. ``also_skip``: folders whose frames
    are not the user's either (torch's, for a warning from a kernel torch calls)."""
    if sys.version_info >= (3, 12):
        skipped = (_PACKAGE_DIR, contextlib.__file__, *also_skip)
        warnings.warn(message, category, stacklevel=2, skip_file_prefixes=skipped)
    else:
        _walked(message, category, also_skip)


def _walked(message: str, category: type[Warning], also_skip: tuple[str, ...]) -> None:
    """Warn at the first frame outside accelctl, found by walking back from the caller's."""
    import inspect  # at warning time only: not on the start-up path

    here = inspect.currentframe()
    frame = here.f_back.f_back if here is not None and here.f_back is not None else None
    if frame is None:  # an interpreter without frames: the caller's line
        warnings.warn(message, category, stacklevel=3)
        return
    level = 3  # 1 is this function, 2 warn_user; 3 its caller, the first frame looked at
    while frame.f_back is not None and (
        _is_ours(frame)
        or _is_import_machinery(frame)
        or frame.f_code.co_filename.startswith(also_skip)
    ):
        frame = frame.f_back
        if not _is_import_machinery(frame):  # warnings.warn does not count those
            level += 1
    warnings.warn(message, category, stacklevel=level)


def _is_ours(frame: FrameType) -> bool:
    # accelctl's modules, and contextlib's, whose __exit__ runs accelctl's context managers.
    filename = frame.f_code.co_filename
    return filename.startswith(_PACKAGE_DIR) or filename == contextlib.__file__


def _is_import_machinery(frame: FrameType) -> bool:
    # What warnings.warn skips when it counts a stacklevel (its _is_internal_frame).
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename

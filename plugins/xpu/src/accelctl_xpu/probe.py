"""One look at the machine for Intel GPUs, and why not if not.

Intel GPU driver, torch's build, Level Zero, devices visible, and why not if not.

The steps go from cheap to dear and stop at the first "no", so that a machine without an Intel
GPU, or with a torch built without XPU, answers from a few ``stat`` calls and one small file read
(no torch import):

1. not macOS (torch's XPU device runs on Linux and Windows);
2. Linux: an Intel GPU bound to the ``i915`` or ``xe`` kernel driver (``/sys/class/drm``);
3. torch's build, read from ``torch/version.py`` as text: no ``xpu`` there is unavailable;
4. Linux: a ``/dev/dri/renderD*`` node this process may open, and the Level Zero loader;
5. the count of visible devices (see :func:`count_devices`), honouring ``ZE_AFFINITY_MASK`` and
   ``ONEAPI_DEVICE_SELECTOR``; torch is imported here, and its XPU runtime is never started.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace

from accelctl import Accelerator
from accelctl.torch_build import TorchBuild

# Steps 1-4 need only the light ``driver``; ``runtime`` and ``visible`` (step 5, with its regex) are
# imported inside the functions that count, so a machine without an Intel GPU never loads them.
from . import driver
from .variables import DEVICE_VARIABLES, SELECTOR_VAR

INSTALL_HINT = (
    "install torch's XPU build (pip install torch --index-url https://download.pytorch.org/whl/xpu)"
)


@dataclass(frozen=True)
class Probe:
    """What the plugin knows about this machine; ``reason`` is None when torch can use a GPU."""

    torch: TorchBuild | None = None
    #: Intel GPUs the kernel drives (Linux; empty elsewhere).
    gpus: tuple[driver.IntelGpu, ...] = ()
    #: Devices ``torch.xpu`` will see (0 until counted, and where unavailable).
    visible: int = 0
    #: Who counted: ``"torch"`` (XPU already in use), ``"sysman"`` or ``"sysfs"``.
    counted_by: str | None = None
    reason: str | None = None

    @property
    def available(self) -> bool:
        """True when torch can run work on at least one visible Intel GPU."""
        return self.reason is None and self.visible > 0

    @property
    def device_count(self) -> int:
        """Devices ``torch.xpu`` will see; 0 when unavailable."""
        return self.visible if self.available else 0


def cheap_probe(environ: Mapping[str, str] | None = None) -> Probe:
    """Steps 1-4: files only, no torch import. ``reason`` None means "worth counting"."""
    environ = os.environ if environ is None else environ
    if sys.platform == "darwin":
        return Probe(reason="Intel GPUs (xpu) do not run on macOS")
    linux = sys.platform.startswith("linux")
    gpus = tuple(driver.intel_gpus()) if linux else ()
    if linux and not gpus:
        return Probe(reason="no Intel GPU driver found (no i915 or xe GPU in /sys/class/drm)")
    build = Accelerator.installed_torch()
    if build is None:
        return Probe(gpus=gpus, reason=Accelerator.TORCH_MISSING)
    base = Probe(torch=build, gpus=gpus)
    if not build.xpu:
        return replace(base, reason=f"{build.describe()} is not an XPU build; {INSTALL_HINT}")
    if linux:
        reason = _linux_stack_reason(environ, build)
        if reason is not None:
            return replace(base, reason=reason)
    return base


def _linux_stack_reason(environ: Mapping[str, str], build: TorchBuild) -> str | None:
    nodes = driver.render_nodes()
    if not nodes:
        return (
            "an Intel GPU driver is loaded, but /dev/dri has no render node "
            "(in a container, pass the device: --device /dev/dri)"
        )
    if not any(os.access(driver.ROOT / "dev/dri" / node, os.R_OK | os.W_OK) for node in nodes):
        return (
            f"this user may not open /dev/dri/{nodes[0]} "
            "(add it to the 'render' group: sudo usermod -aG render $USER)"
        )
    if driver.find_loader(environ, build.lib_folders) is None:
        return (
            f"no Level Zero loader ({driver.LOADER}) found; install Intel's GPU runtime "
            "(the level-zero package) or add its folder to LD_LIBRARY_PATH"
        )
    return None


def count_devices(gpus: int, environ: Mapping[str, str]) -> tuple[int, str]:
    """The devices ``torch.xpu`` will see and who counted them, without starting its runtime.

    - XPU already in use in this process, or Windows: torch's own count (its runtime applies the
      variables).
    - Level Zero Sysman through torch (``ZE_AFFINITY_MASK`` applied by torch), then
      ``ONEAPI_DEVICE_SELECTOR`` over its devices: exact, tiles and all.
    - Otherwise the kernel's Intel GPUs through both variables: one device per GPU, which is
      short of Level Zero's count on a multi-tile GPU under its default ``FLAT`` hierarchy, and
      over it where an integrated GPU sits beside a discrete one (torch shows the discrete only).
      This is chosen over asking the SYCL runtime, which would break a later ``fork``.
    """
    from . import runtime
    from .visible import device_selector, visible_devices

    if runtime.in_use() or sys.platform.startswith("win"):
        # In use: nothing new is started. Windows: no /sys to count from, and no fork to break
        # (child processes are spawned there).
        return runtime.device_count(), "torch"
    sysman = runtime.sysman_count()
    if sysman is not None:
        return len(device_selector(environ.get(SELECTOR_VAR), sysman)), "sysman"
    return len(visible_devices(gpus, environ)), "sysfs"


_current = Accelerator.once_per_environment(DEVICE_VARIABLES, lambda: probe())


def current() -> Probe:
    """Return this process's probe, made once per setting of the visibility variables.

    ``detect``, ``auto_device_count`` and ``unavailable_reason`` then look once.
    """
    return _current()


def forget() -> None:
    """Look again at the next :func:`current` (tests; a driver installed meanwhile)."""
    _current.forget()


def probe(environ: Mapping[str, str] | None = None) -> Probe:
    """Look at the machine (see the module's docstring for the steps)."""
    environ = os.environ if environ is None else environ
    found = cheap_probe(environ)
    if found.reason is not None:
        return found
    visible, counted_by = count_devices(len(found.gpus), environ)
    found = replace(found, visible=visible, counted_by=counted_by)
    if visible > 0:
        return found
    setting = Accelerator.describe_variables(DEVICE_VARIABLES, environ)
    if setting:
        return replace(found, reason=f"{setting} hides every Intel GPU")
    return replace(found, reason="Level Zero lists no Intel GPU that torch can use")

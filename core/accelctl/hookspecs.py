"""The hooks an accelerator plugin implements: the contract between accelctl and a vendor.

One plugin serves one accelerator, so no hook takes an accelerator name. Every hook is called on one
plugin at a time (never broadcast to all of them) through :class:`accelctl.AcceleratorHandle`, which
checks what the hook returns and names the plugin when it breaks the rules below. The required
and optional hooks are :data:`REQUIRED_HOOKS` and :data:`OPTIONAL_HOOKS`.

A module plugin marks its functions with ``@accelctl.hookimpl``; a subclass of
:class:`accelctl.Accelerator` needs no markers, its methods are its hooks. A hook implementation
may declare fewer parameters than the specification (pluggy's rule), never other ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._contract.markers import hookspec

if TYPE_CHECKING:
    import torch

    from ._contract.info import AcceleratorInfo
    from ._contract.kernel_gaps import KernelGaps
    from ._contract.peak import DevicePeak

#: Hooks every plugin must implement; a plugin missing one fails to load.
REQUIRED_HOOKS = (
    "detect",
    "auto_device_count",
    "parse_devices",
    "get_parallel_devices",
    "device_stats",
)
#: Hooks a plugin may leave out; accelctl then uses the default each one documents.
OPTIONAL_HOOKS = (
    "unavailable_reason",
    "accelerator_info",
    "setup_device",
    "teardown",
    "environment_info",
    "device_peak",
    "kernel_gaps",
)
ALL_HOOKS = REQUIRED_HOOKS + OPTIONAL_HOOKS


@hookspec
def detect() -> bool:
    """Say whether this accelerator can run torch work in this process now.

    Called by ``accelctl list``, by ``resolve("auto")`` and ``resolve("gpu")`` for every enabled
    plugin, and by ``resolve(<name>)`` before the accelerator is used.

    :returns: ``True`` when torch can use at least one device of this kind here.

    Rules: answer in milliseconds; never raise on a machine without the hardware (return
    ``False``); never initialise a device runtime in a way that breaks a later ``fork`` (for CUDA:
    no CUDA context in the parent; NVML queries are fine). Say no cheaply where you can, before
    importing torch (for example: not on the right operating system, the vendor's package is not
    installed).

    .. code-block:: python

        @accelctl.hookimpl
        def detect() -> bool:
            if importlib.util.find_spec("habana_frameworks") is None:
                return False
            import habana_frameworks.torch.hpu as hpu
            return hpu.is_available()
    """
    raise NotImplementedError


@hookspec
def auto_device_count() -> int:
    """Return how many devices of this accelerator are visible to this process.

    Called by ``accelctl list`` for its device column, by the shared device parser to know what
    an explicit spec may index (``"1,"`` needs two visible devices), and when a devices spec is
    ``"auto"``.

    :returns: a non-negative ``int``: ``0`` when :func:`detect` is ``False``. CPU returns ``1``.

    This is the *visible* count, not a decision: what ``devices="auto"`` uses is the core's rule
    (all visible devices with a ``distributed_backend``, else the first). Honour the vendor's
    visible-device variable (``CUDA_VISIBLE_DEVICES``, ...). :func:`detect`'s fork-safety applies.

    .. code-block:: python

        @accelctl.hookimpl
        def auto_device_count() -> int:
            return _count_visible_devices() if detect() else 0
    """
    raise NotImplementedError


@hookspec
def parse_devices(devices: Any) -> int | list[int]:
    """Normalise a devices spec as a user wrote it.

    Called by :func:`accelctl.resolve` (and so by the Trainer and ``accelctl launch``) with the
    ``devices`` argument as given: ``"auto"``, an ``int``, a string such as ``"2"`` or ``"0,1"``, a
    list or tuple of indices, or anything else a user may type.

    :param devices: the spec as given, not yet validated.
    :returns: a device count (``int``) or a list of device indices; what it returns is passed to
        :func:`get_parallel_devices` unchanged.
    :raises accelctl.DeviceSpecError: for anything that is not a valid spec, and nothing else: no
        bare ``TypeError``, ``IndexError`` or ``int()`` message may reach the user.

    Indexed accelerators share the core's parser, which implements the whole table of accepted
    forms and writes the error messages:

    .. code-block:: python

        @accelctl.hookimpl
        def parse_devices(devices):
            return accelctl.parse_indexed_devices(
                devices, visible=auto_device_count(), accelerator="hpu"
            )
    """
    raise NotImplementedError


@hookspec
def get_parallel_devices(devices: Any) -> list[torch.device]:
    """Return one ``torch.device`` per process, in rank order.

    Called by :func:`accelctl.resolve` with exactly what :func:`parse_devices` returned.

    :param devices: the value :func:`parse_devices` returned (a count or a list of indices).
    :returns: a non-empty ``list[torch.device]``, one per process: ``devices[LOCAL_RANK]`` is the
        device of that process.

    .. code-block:: python

        @accelctl.hookimpl
        def get_parallel_devices(devices):
            import torch
            return [torch.device("hpu", i) for i in devices]
    """
    raise NotImplementedError


@hookspec
def device_stats(device: torch.device | str) -> dict[str, int | float]:
    """Return flat figures for one device.

    Called by the Trainer every ``log_every_n_steps`` steps with its ``torch.device``, and by
    ``accelctl stats``, which imports no torch, with the device's string form.

    :param device: one of the devices :func:`get_parallel_devices` returned, as a
        ``torch.device`` or as its string ``"<type>:<index>"`` (``"cpu"`` without an index), the
        type being :attr:`AcceleratorInfo.device_type` or else the accelerator's name. Accept both:
        :func:`accelctl.split_device` splits either without importing torch.
    :returns: a flat ``dict`` of ``str`` to ``int`` or ``float``, the unit in the key's suffix
        (``_bytes``, ``_percent`` from 0 to 100, ``_watts``, ``_celsius``, ``_hz``,
        ``_per_second``; none: a count or ratio). Use the common keys of
        :data:`accelctl.stats_keys.VOCABULARY` where the figure exists:
        ``memory_allocated_bytes``, ``memory_reserved_bytes``, ``memory_peak_allocated_bytes``,
        ``memory_used_bytes``, ``memory_total_bytes``, ``utilization_percent``,
        ``temperature_celsius``, ``power_watts`` (CPU also ``cpu_percent``, ``swap_percent``).
        Prefix other figures with the accelerator's name (``"hpu.num_allocs"``). Leave out a
        figure the device does not report (not supported); give ``float("nan")`` for one it
        reports but could not read this time. Return ``{}`` where nothing can be read. Where the
        plugin gives no allocator figures and this process already uses the device, the handle
        adds them from ``torch.accelerator`` (:mod:`accelctl.stats_keys` has the rules).

    Never block (no sampling sleeps) and never initialise a device runtime that is not in use yet.

    .. code-block:: python

        @accelctl.hookimpl
        def device_stats(device):
            kind, index = accelctl.split_device(device)  # torch.device or "hpu:0"
            import habana_frameworks.torch.hpu as hpu
            return {"memory_allocated_bytes": hpu.memory_allocated(index or 0)}
    """
    raise NotImplementedError


@hookspec
def unavailable_reason() -> str | None:
    """Say in one line why :func:`detect` is ``False`` here.

    Optional. Called by ``accelctl list`` (its ``reason`` column) and when building an
    :class:`accelctl.AcceleratorUnavailableError`, only after :func:`detect` returned ``False``.

    :returns: a short sentence such as ``"no NVIDIA driver"``, ``"torch 2.13.0+cpu is a CPU-only
        build"`` or ``"not macOS"``; ``None`` when there is nothing to add.

    .. code-block:: python

        @accelctl.hookimpl
        def unavailable_reason():
            if importlib.util.find_spec("habana_frameworks") is None:
                return "habana_frameworks is not installed"
            return None
    """
    raise NotImplementedError


@hookspec
def accelerator_info() -> AcceleratorInfo | dict[str, Any]:
    """Describe the accelerator: description, family, priority, distributed backend, aliases.

    Optional: without it the plugin gets ``AcceleratorInfo()`` (priority 0, no family, single
    process only). Called once per process when the plugin is first used; the result is cached.

    :returns: an :class:`accelctl.AcceleratorInfo`, or a ``dict`` of its fields.

    ``family="gpu"`` puts the accelerator under ``accelerator="gpu"``. The available accelerator of
    highest ``priority`` wins under ``"auto"`` (CPU 0; CUDA, MPS 100; a specialised chip 200).
    ``distributed_backend`` names the ``torch.distributed`` backend for several processes;
    ``None`` restricts the accelerator to one process. ``device_type`` is torch's name for the
    devices where it differs from the accelerator's name (``accelctl stats`` builds
    ``"<device_type>:<index>"`` from it without importing torch).

    .. code-block:: python

        @accelctl.hookimpl
        def accelerator_info():
            return accelctl.AcceleratorInfo(
                description="Intel Gaudi (Habana) HPU",
                priority=200,
                distributed_backend="hccl",
                aliases=("gaudi",),
            )
    """
    raise NotImplementedError


@hookspec
def setup_device(device: torch.device) -> None:
    """Make ``device`` the current device of this process.

    Optional. Called by the Trainer (and the Lightning integration) once per process, before the
    model is moved, with ``devices[LOCAL_RANK]``. CUDA calls ``torch.cuda.set_device(device)``.

    :param device: this process's device.

    .. code-block:: python

        @accelctl.hookimpl
        def setup_device(device):
            import torch
            torch.cuda.set_device(device)
    """
    raise NotImplementedError


@hookspec
def teardown() -> None:
    """Release what the accelerator holds in this process.

    Optional. Called by the Trainer at the end of ``fit``, also when training raised. CUDA empties
    its caching allocator.

    .. code-block:: python

        @accelctl.hookimpl
        def teardown():
            import torch
            torch.cuda.empty_cache()
    """
    raise NotImplementedError


@hookspec
def environment_info() -> dict[str, str | int | float | bool | None]:
    """Contribute this accelerator's lines to ``accelctl env`` (the block for a bug report).

    Optional. Called by ``accelctl env`` only, once per run, under the hook deadline; an exception
    or a value outside the rules below shows as this plugin's error line (the command exits 0).

    :returns: a flat ``dict`` of facts: ``str`` keys (non-empty), values ``str``, ``int``,
        ``float``, ``bool`` or ``None`` (known to be unknown). Put what a maintainer needs to
        reproduce a bug: driver and runtime versions, the vendor's visible-device variables that
        are set (the variable's name as the key). The device count and availability are in the
        row already. Return ``{}`` when there is nothing to add.

    The rules of :func:`detect` apply: answer quickly, never raise without the hardware, initialise
    no device runtime, and import no torch where the facts can be read without it.

    .. code-block:: python

        @accelctl.hookimpl
        def environment_info():
            facts = {"hpu_driver": _driver_version()}  # None when unknown
            if "HABANA_VISIBLE_MODULES" in os.environ:
                facts["HABANA_VISIBLE_MODULES"] = os.environ["HABANA_VISIBLE_MODULES"]
            return facts
    """
    raise NotImplementedError


@hookspec
def device_peak(device: torch.device | str) -> DevicePeak | dict[str, Any] | None:
    """Say what one device can do at most: dense FLOPs per second by data type, and bandwidth.

    The bandwidth is the device's memory bandwidth.

    Optional: without it (or with ``None``) the peak is unknown, and the Trainer logs the model's
    ``flops_per_second`` but no ``mfu``. Called by the Trainer once per ``fit``, after
    :func:`setup_device`, with its ``torch.device``; the ``device`` forms are those of
    :func:`device_stats`.

    :param device: one of the devices :func:`get_parallel_devices` returned, or its string.
    :returns: an :class:`accelctl.DevicePeak` (or a ``dict`` of its fields): ``flops`` maps data
        types (``"float32"``, ``"tf32"``, ``"bfloat16"``, ``"float16"``, ``"float8"``, ...) to
        FLOPs per second without structured sparsity; ``memory_bandwidth_bytes_per_second``;
        ``source`` says where the figures come from. ``None`` where the peak is not known:
        never a guess.

    The rules of :func:`device_stats` apply: never block, and never initialise a device
    runtime (read a device's name through the vendor's management library, as the CUDA plugin
    reads NVML).

    .. code-block:: python

        #: Per model, from the vendor's datasheet: dense figures at the boost clock.
        DATASHEET = {
            "X1": accelctl.DevicePeak(
                flops={"bfloat16": 400e12, "float32": 100e12},
                memory_bandwidth_bytes_per_second=2.0e12,
                source="X1 datasheet, dense",
            ),
        }

        @accelctl.hookimpl
        def device_peak(device):
            kind, index = accelctl.split_device(device)
            return DATASHEET.get(_model_name(index or 0))  # None: a model not in the table
    """
    raise NotImplementedError


@hookspec
def kernel_gaps() -> KernelGaps | dict[str, Any] | None:
    """Say which of torch's operators the device lacks, and which must never run on the CPU.

    Also torch's own switch that runs the device's missing kernels on the CPU, where there is one.

    Optional: without it (or with ``None``) nothing is declared, and accelctl learns of a missing
    kernel from the error torch raises at its first call (an operator without any kernel for the
    device). Called once per process that trains on the device (the Trainer's ``fit``, a bridge's
    set-up), after :func:`setup_device`, and by ``accelctl validate --capabilities``.

    :returns: an :class:`accelctl.KernelGaps` (or a ``dict`` of its fields), operators named as
        torch's dispatcher names them (``"aten::convolution_overrideable"``,
        ``"aten::add_.Tensor"``):

        - ``missing``: operators the device lacks, or has a placeholder kernel for (one
          registered that returns no real result). Such a placeholder is replaced: by a kernel
          that stops with :class:`accelctl.MissingKernelError` at its first call, or with
          ``ACCELCTL_CPU_FALLBACK=1`` by the CPU's kernel;
        - ``never_fall_back``: operators that must never run on the CPU in the device's place
          (their CPU result would differ in a way that matters): they stop with
          ``MissingKernelError`` even with ``ACCELCTL_CPU_FALLBACK=1``;
        - ``fallback_variable``: torch's own switch for the device (MPS:
          ``"PYTORCH_ENABLE_MPS_FALLBACK"``), which accelctl's switch then sets (torch reads it
          when it is imported: ``accelctl launch`` sets it in its children's environment).

    Rules: no device work (a list, not a probe); operators named must exist in this torch (the
    conformance kit checks them).

    .. code-block:: python

        @accelctl.hookimpl
        def kernel_gaps():
            return accelctl.KernelGaps(
                missing=("aten::_scaled_dot_product_fused_attention_overrideable",),
                never_fall_back=("aten::_fused_adamw_",),
                note="fused attention lands in the 2.1 driver",
            )
    """
    raise NotImplementedError

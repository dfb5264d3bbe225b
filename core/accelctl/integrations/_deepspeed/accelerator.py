"""DeepSpeed's ``DeepSpeedAccelerator`` made from an accelctl plugin and torch's generic APIs.

The torch APIs are ``torch.accelerator`` (device index, memory, synchronize) and the device's
module ``torch.get_device_module(type)`` (RNG, streams, events). From the plugin come its
``distributed_backend`` as DeepSpeed's communication backend, its ``device_stats`` for the
memory torch does not count and the dtypes the capability probe finds; op builders come from
:mod:`.ops`.

DeepSpeed's interface grows and shrinks between releases (0.16 declares ``amp``,
``pin_memory`` and ``is_pinned`` abstract; 0.19 makes pinning concrete); :func:`accelerator_class`
builds the class against the installed release and names any method it declares that the bridge
does not know, instead of failing inside ``deepspeed.initialize``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

import accelctl
from accelctl._choice.selection import known_name
from accelctl._deepspeed.refusals import runs_float64

from . import ops as _deepspeed_ops


class PluginAccelerator(DeepSpeedAccelerator):  # type: ignore[misc]  # DeepSpeed ships no types
    """One accelctl accelerator as DeepSpeed's accelerator, in this process.

    :param handle: the accelctl accelerator.
    :param device: this process's device (``devices[LOCAL_RANK]``).
    :param local_world_size: processes on this machine (DeepSpeed's device count for CPUs).
    """

    def __init__(
        self, handle: accelctl.AcceleratorHandle, device: torch.device, local_world_size: int
    ) -> None:
        super().__init__()
        #: The accelctl accelerator behind it.
        self.handle = handle
        #: This process's device.
        self.process_device = device
        self._type = device.type
        self._host = device.type == "cpu"
        self._local_world_size = local_world_size
        self._name = device.type  # DeepSpeed's own paths for "cpu" apply to the CPU plugin
        self._communication_backend_name = handle.info.distributed_backend
        self._compile_backend = "inductor"
        self._module: Any = None if self._host else torch.get_device_module(device.type)
        self._peak_rss = 0
        #: ``_torch_pins_host_memory`` of DeepSpeed 0.19: a CPU tensor is not page-locked.
        self._torch_pins_host_memory = not self._host

    def __repr__(self) -> str:
        return f"PluginAccelerator({known_name(self.handle)!r}, {self.process_device})"

    # -- how the device runs
    def is_synchronized_device(self) -> bool:
        return self._host

    def use_host_timers(self) -> bool:
        return self._host

    def resolves_data_dependency(self) -> bool:
        return self._host

    def handles_memory_backpressure(self) -> bool:
        return self._host

    # -- devices
    def device_name(self, device_index: int | None = None) -> str:
        if device_index is None or self._host:
            return self._type
        return f"{self._type}:{device_index}"

    def device(self, device_index: int | None = None) -> Any:
        return None if self._host else self._module.device(device_index)

    def set_device(self, device_index: int | str | torch.device) -> None:
        # DeepSpeed passes an index, and ZeRO-3's Init its local device (a torch.device).
        if self._host:
            return
        if isinstance(device_index, int):
            self.handle.setup_device(torch.device(self._type, device_index))
        else:
            self.handle.setup_device(torch.device(device_index))

    def current_device(self) -> int:
        if self._host:
            return self.process_device.index or 0
        return torch.accelerator.current_device_index()

    def current_device_name(self) -> str:
        return self._type if self._host else f"{self._type}:{self.current_device()}"

    def device_count(self) -> int:
        return self._local_world_size if self._host else torch.accelerator.device_count()

    def synchronize(self, device_index: int | None = None) -> None:
        if not self._host:
            torch.accelerator.synchronize(device_index)

    def is_available(self) -> bool:
        return True  # accelctl selected it

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        return callback()

    def communication_backend_name(self) -> str | None:
        return self._communication_backend_name

    # -- random numbers: the device's own generator where its module has one
    def _rng(self) -> Any:
        return torch if self._host or not hasattr(self._module, "get_rng_state") else self._module

    def random(self) -> Any:
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        if self._rng() is torch or device_index is None:
            self._rng().set_rng_state(new_state)
        else:
            self._module.set_rng_state(new_state, device_index)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        if self._rng() is torch or device_index is None:
            state: torch.Tensor = self._rng().get_rng_state()
        else:
            state = self._module.get_rng_state(device_index)
        return state

    def manual_seed(self, seed: int) -> Any:
        return self._rng().manual_seed(seed)

    def manual_seed_all(self, seed: int) -> Any:
        rng = self._rng()
        seed_all = getattr(rng, "manual_seed_all", rng.manual_seed)
        return seed_all(seed)

    def initial_seed(self) -> int:
        seed: int = self._rng().initial_seed()
        return seed

    def default_generator(self, device_index: int) -> torch.Generator:
        generators = getattr(self._module, "default_generators", None)
        return torch.default_generator if generators is None else generators[device_index]

    # -- streams and events (none on the CPU, as DeepSpeed's CPU accelerator)
    @property
    def Stream(self) -> Any:  # DeepSpeed's name
        return None if self._host else getattr(self._module, "Stream", None)

    def stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        if self._host or stream is None or not hasattr(self._module, "stream"):
            return contextlib.nullcontext()
        context: contextlib.AbstractContextManager[Any] = self._module.stream(stream)
        return context

    def current_stream(self, device_index: int | None = None) -> Any:
        return None if self._host else torch.accelerator.current_stream(device_index)

    def default_stream(self, device_index: int | None = None) -> Any:
        if self._host or not hasattr(self._module, "default_stream"):
            return None
        return self._module.default_stream(device_index)

    @property
    def Event(self) -> Any:  # DeepSpeed's name
        return None if self._host else getattr(self._module, "Event", None)

    # -- memory: torch.accelerator's counters on a device, the process's resident set on a CPU
    def _rss(self) -> int:
        import psutil

        rss = int(psutil.Process().memory_info().rss)
        self._peak_rss = max(self._peak_rss, rss)
        return rss

    def empty_cache(self) -> None:
        if not self._host:
            torch.accelerator.empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        return self._rss() if self._host else torch.accelerator.memory_allocated(device_index)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        if self._host:
            self._rss()
            return self._peak_rss
        return torch.accelerator.max_memory_allocated(device_index)

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        self.reset_peak_memory_stats(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        return self.memory_reserved(device_index)

    def max_memory_cached(self, device_index: int | None = None) -> int:
        return self.max_memory_reserved(device_index)

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        self.reset_peak_memory_stats(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        if self._host:
            rss = self._rss()
            return {"allocated_bytes.all.current": rss, "allocated_bytes.all.peak": self._peak_rss}
        return dict(torch.accelerator.memory_stats(device_index))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        if self._host:
            self._peak_rss = 0
            self._rss()
        else:
            torch.accelerator.reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        return self._rss() if self._host else torch.accelerator.memory_reserved(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        if self._host:
            self._rss()
            return self._peak_rss
        return torch.accelerator.max_memory_reserved(device_index)

    def _device_memory(self, device_index: int | None) -> tuple[int, int] | None:
        """(free, total) bytes: the plugin's ``device_stats``, else ``torch.accelerator``'s."""
        index = self.process_device.index if device_index is None else device_index
        device = torch.device(self._type, index) if index is not None else self.process_device
        stats = self.handle.device_stats(device)
        total = stats.get("memory_total_bytes")
        if total:
            used = stats.get("memory_used_bytes", stats.get("memory_reserved_bytes", 0))
            return int(total) - int(used), int(total)
        if self._host:
            return None
        try:
            free, total = torch.accelerator.get_memory_info(index)
        except (RuntimeError, NotImplementedError):
            return None
        return int(free), int(total)

    def total_memory(self, device_index: int | None = None) -> int:
        known = self._device_memory(device_index)
        if known is None:
            import psutil

            return int(psutil.virtual_memory().total)
        return known[1]

    def available_memory(self, device_index: int | None = None) -> int:
        known = self._device_memory(device_index)
        if known is None:
            import psutil

            return int(psutil.virtual_memory().available)
        return known[0]

    # -- dtypes, from the capability probe of the device's autocast
    def is_bf16_supported(self) -> bool:
        return _dtype_supported(self._type, "bf16")

    def is_fp16_supported(self) -> bool:
        return _dtype_supported(self._type, "fp16")

    def is_fp64_supported(self) -> bool:
        return _dtype_supported(self._type, "fp64")

    def supported_dtypes(self) -> list[torch.dtype]:
        dtypes = [torch.float32]
        dtypes += [torch.bfloat16] if self.is_bf16_supported() else []
        dtypes += [torch.float16] if self.is_fp16_supported() else []
        return dtypes

    def amp(self) -> Any:
        return torch.amp if self._host else getattr(self._module, "amp", torch.amp)

    # -- profiling ranges, graphs, triton: nothing device-generic to call
    def range_push(self, msg: str, domain: Any = None, category: Any = None) -> None:
        return None

    def range_pop(self, domain: Any = None) -> None:
        return None

    def is_triton_supported(self) -> bool:
        return False

    def is_current_stream_capturing(self) -> bool:
        return False

    def create_graph(self) -> None:
        return None

    def capture_to_graph(
        self, graph: Any, pool: Any = None, stream: Any = None
    ) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def replay_graph(self, graph: Any) -> None:
        return None

    # -- tensor constructors on the device (torch's legacy types on the CPU)
    def _tensor(self, dtype: torch.dtype, legacy: str) -> Any:
        if self._host:
            return getattr(torch, legacy)
        return functools.partial(torch.tensor, dtype=dtype, device=self._type)

    @property
    def BFloat16Tensor(self) -> Any:  # DeepSpeed's names, from here on
        return self._tensor(torch.bfloat16, "BFloat16Tensor")

    @property
    def ByteTensor(self) -> Any:
        return self._tensor(torch.uint8, "ByteTensor")

    @property
    def DoubleTensor(self) -> Any:
        return self._tensor(torch.float64, "DoubleTensor")

    @property
    def FloatTensor(self) -> Any:
        return self._tensor(torch.float32, "FloatTensor")

    @property
    def HalfTensor(self) -> Any:
        return self._tensor(torch.float16, "HalfTensor")

    @property
    def IntTensor(self) -> Any:
        return self._tensor(torch.int32, "IntTensor")

    @property
    def LongTensor(self) -> Any:
        return self._tensor(torch.int64, "LongTensor")

    # -- pinned host memory: torch pins for the current accelerator; nothing to pin for a CPU
    def _torch_pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self._host else tensor.pin_memory()

    def _torch_empty_pinned(self, tensor: torch.Tensor, shape: Any) -> torch.Tensor:
        return tensor.new_empty(shape, pin_memory=not self._host)

    def _torch_is_pinned(self, tensor: torch.Tensor) -> bool:
        return not self._host and tensor.is_pinned()

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == self._type

    # -- compiled ops (:mod:`.ops`)
    def op_builder_dir(self) -> str:
        return _deepspeed_ops.HOST_BUILDERS

    def get_op_builder(self, class_name: str) -> type:
        return _deepspeed_ops.builder_class(class_name, self)

    def create_op_builder(self, class_name: str) -> Any:
        return self.get_op_builder(class_name)()

    def build_extension(self) -> Any:
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    # -- DeepSpeed's launcher: accelctl leaves visible-device variables alone (they renumber)
    def export_envs(self) -> list[str]:
        return []

    def visible_devices_envs(self) -> list[str]:
        return []

    def set_visible_devices_envs(
        self, current_env: dict[str, str], local_accelerator_ids: Any
    ) -> None:
        return None

    def get_compile_backend(self) -> str:
        return self._compile_backend

    def set_compile_backend(self, backend: str) -> None:
        supported = torch._dynamo.list_backends(exclude_tags=())
        if backend not in supported:
            raise ValueError(
                f"compile backend {backend!r} is not one torch has; torch has: "
                f"{', '.join(supported)}"
            )
        self._compile_backend = backend


# -- methods older releases declare abstract that newer ones implement themselves (0.16)
def _pin_memory(self: PluginAccelerator, tensor: torch.Tensor, align_bytes: int = 1) -> Any:
    return self._torch_pin_memory(tensor)


def _is_pinned(self: PluginAccelerator, tensor: torch.Tensor) -> bool:
    return self._torch_is_pinned(tensor)


_OLDER = {"pin_memory": _pin_memory, "is_pinned": _is_pinned}


@functools.cache
def accelerator_class() -> type[PluginAccelerator]:
    """:class:`PluginAccelerator` for the installed DeepSpeed (:func:`completed`)."""
    return completed(PluginAccelerator)


def completed(cls: type[PluginAccelerator]) -> type[PluginAccelerator]:
    """Return ``cls``, completed with the methods the installed release declares abstract.

    ``cls`` itself when nothing is missing, else a subclass adding the methods that later
    releases implement (:data:`_OLDER`).

    :raises accelctl.ProcessSetupError: when the release declares an abstract method the bridge
        does not implement (a newer interface), naming it.
    """
    abstract = set(getattr(cls, "__abstractmethods__", ()))
    unknown = sorted(abstract - set(_OLDER))
    if unknown:
        import deepspeed

        raise accelctl.ProcessSetupError(
            f"DeepSpeed {deepspeed.__version__}'s DeepSpeedAccelerator declares methods the "
            f"accelctl bridge does not implement: {', '.join(unknown)}. The bridge is tested with "
            f"{_window_text()}: pip install '{_window_pinned()}'"
        )
    if not abstract:
        return cls
    methods = {name: _OLDER[name] for name in abstract}
    return type(cls.__name__, (cls,), methods)


def _window_text() -> str:
    from .._shared.versions import DEEPSPEED

    return DEEPSPEED.text()


def _window_pinned() -> str:
    from .._shared.versions import DEEPSPEED

    return DEEPSPEED.pinned()


# -- dtypes
_PROBED = {"bf16": "bf16-autocast", "fp16": "fp16-autocast"}


@functools.cache
def _dtype_supported(device_type: str, dtype: str) -> bool:
    """Say whether the device trains in ``dtype``.

    The capability probe's autocast row for bf16 and fp16 (a matmul under ``torch.autocast`` gives
    that dtype); for fp64, whether the device runs what DeepSpeed computes in it (else DeepSpeed
    keeps its norms in float32, as on MPS)."""
    if dtype == "fp64":  # the check accelctl launch makes too
        return runs_float64(device_type)
    from accelctl.capabilities import _Probe, _run

    probe = _Probe(device_type, None)
    try:
        return _run(_PROBED[dtype], probe).supported
    finally:
        probe.close()

"""What a device can do for training, probed in this process: the capability matrix's rows.

The rows of the capability matrix (``accelctl validate --capabilities``) and the needs of sharded
training (FSDP2). The rows for DeepSpeed's ZeRO: the collectives it calls beyond FSDP2's
(``broadcast``, ``all-reduce``) and which of its compiled ops the DeepSpeed bridge gives the device
(``deepspeed-device-ops``) or can build on this machine (``deepspeed-host-ops``, what ZeRO-Offload's
CPU optimizers need).

Each probe runs the smallest piece of torch that the feature rests on, on the device itself, and
records the device's own words when it fails (the exception's type and message) or what was
missing. A "no" is a fact about the device, not an error: :func:`probe_capabilities` never raises
for one. torch is imported inside the probes only, so importing this module costs nothing.

On torch_openreg 0.0.2 (its reasons: "module 'torch_openreg.openreg' has no attribute 'Stream'
...", "NotImplementedError: You should register `PrivateUse1HooksInterface` ... and implement
`resizePrivateUse1Bytes` ..."):

>>> from accelctl.capabilities import fsdp_gaps
>>> [gap.name for gap in fsdp_gaps("openreg", "occl")]
['device-streams', 'storage-resize']
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._base.text import describe_exception, one_line
from ._contract.kernel_gaps import KernelGaps
from ._kernels.probe import MissingKernel

if TYPE_CHECKING:
    import torch

__all__ = [
    "CAPABILITIES",
    "FSDP_NEEDS",
    "Capability",
    "fsdp_gaps",
    "iter_capabilities",
    "probe_capabilities",
]


@dataclass(frozen=True)
class Capability:
    """One row of the capability matrix: a capability, whether the device has it, and why.

    ``name`` is an id of :data:`CAPABILITIES`; ``reason`` is what was run and seen, in the device's
    own words where it has some (an exception's ``"TypeName: message"``).

    The ``kernels`` row has three fields more: ``missing_kernels``, what its cases found
    missing or wrong (:class:`~accelctl._kernels.probe.MissingKernel`, each saying whether
    ``ACCELCTL_CPU_FALLBACK=1`` runs it on the CPU); ``kernel_cases``, the cases it ran; and
    ``kernel_gaps``, what the plugin declares (None where its hook failed or nothing ran).
    """

    name: str
    supported: bool
    reason: str
    missing_kernels: tuple[MissingKernel, ...] = ()
    kernel_cases: tuple[str, ...] = ()
    kernel_gaps: KernelGaps | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the row as ``--capabilities --json`` prints it.

        ``{"name", "supported", "reason"}``; the ``kernels`` row adds ``missing_kernels``,
        ``kernel_cases`` and ``kernel_gaps``."""
        row: dict[str, Any] = {
            "name": self.name,
            "supported": self.supported,
            "reason": self.reason,
        }
        if self.name == "kernels":
            row["missing_kernels"] = [found.to_dict() for found in self.missing_kernels]
            row["kernel_cases"] = list(self.kernel_cases)
            row["kernel_gaps"] = None if self.kernel_gaps is None else self.kernel_gaps.to_dict()
        return row

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Capability:
        """The row :meth:`to_dict` wrote (the probe process's message)."""
        gaps = data.get("kernel_gaps")
        return cls(
            str(data["name"]),
            bool(data["supported"]),
            str(data["reason"]),
            missing_kernels=tuple(
                MissingKernel.from_dict(found) for found in data.get("missing_kernels") or ()
            ),
            kernel_cases=tuple(str(case) for case in data.get("kernel_cases") or ()),
            kernel_gaps=None if gaps is None else KernelGaps.coerce(gaps),
        )


#: Every row of the matrix, in the order :func:`probe_capabilities` probes and reports them.
CAPABILITIES: tuple[str, ...] = (
    "bf16-autocast",
    "fp16-autocast",
    "rng-state",
    "memory-stats",
    "device-streams",
    "storage-resize",
    "ddp",
    "all-gather-into-tensor",
    "reduce-scatter-tensor",
    "broadcast",
    "all-reduce",
    "compile",
    "deepspeed-device-ops",
    "deepspeed-host-ops",
    "kernels",
)
#: What FSDP2 (``torch.distributed.fsdp.fully_shard``) needs of a device and its backend.
FSDP_NEEDS: tuple[str, ...] = (
    "device-streams",
    "storage-resize",
    "all-gather-into-tensor",
    "reduce-scatter-tensor",
)

#: FSDP2 takes these from the device's module (``torch.<device_type>``).
_STREAM_NAMES = ("Stream", "Event", "current_stream")


class _Missing(Exception):
    """A probe's "no" that is not the device's exception: its message is the whole reason."""


class _Probe:
    """What the probes of one device share: the device and a 1-process group.

    The group is made on first need and destroyed by :meth:`close`."""

    def __init__(
        self,
        device_type: str,
        backend: str | None,
        kernel_gaps: Callable[[], KernelGaps] | None = None,
    ) -> None:
        import torch

        self.torch = torch
        self.device_type = device_type
        self.backend = backend
        self.kernel_gaps = kernel_gaps
        self.module: Any = None if device_type == "cpu" else getattr(torch, device_type, None)
        self.device = torch.device("cpu") if device_type == "cpu" else self._current_device()
        self._group: Any = None
        self._group_error: str | None = None

    def _current_device(self) -> torch.device:
        """Return the device of this type that the process is on.

        ``setup_device`` made it current: the device module's ``current_device()``, else index 0."""
        current = getattr(self.module, "current_device", None)
        index = current() if callable(current) else 0
        return self.torch.device(self.device_type, index if isinstance(index, int) else 0)

    def group(self) -> Any:
        """Return the 1-process group on :attr:`backend`, made on first need.

        Rank 0 of 1, on an in-memory store; raises :class:`_Missing` saying why there is none."""
        if self._group is not None:
            return self._group
        if self._group_error is None:
            self._group_error = self._init_group()
        if self._group_error:
            raise _Missing(self._group_error)
        return self._group

    def _init_group(self) -> str:
        if self.backend is None:
            return "no distributed backend (distributed_backend is None): one process only"
        gap = _backend_gap(self.backend, self.device_type)
        if gap is not None:
            return gap
        import torch.distributed as dist

        try:
            store = dist.HashStore()  # type: ignore[attr-defined]  # not in torch's stubs
            dist.init_process_group(self.backend, store=store, rank=0, world_size=1)
        except Exception as exc:
            failure = describe_exception(exc)
            return f"init_process_group({self.backend!r}) on 1 process failed: {failure}"
        self._group = dist.group.WORLD
        return ""

    def close(self) -> None:
        if self._group is not None:
            import torch.distributed as dist

            self._group = None
            dist.destroy_process_group()


def _backend_gap(backend: str, device_type: str) -> str | None:
    """Say why ``backend`` cannot carry ``device_type`` tensors in this torch; None when it can.

    ``backend`` is ``"gloo"``, or per device type ``"cpu:gloo,cuda:nccl"``; read from its
    registration alone (no process group): None when it is registered for the device type and
    compiled in. The check ``accelctl launch``, the Trainer and ``validate`` make
    (``_choice.distributed_backend``), worded as a capability's reason."""
    from ._choice.distributed_backend import backend_problem

    problem = backend_problem(backend, device_type)
    if problem is None:
        return None
    if problem.skip:  # this torch cannot tell: for a capability, a gap
        return problem.message
    return f"the backend {backend!r} {problem}"


# -- the probes: each returns what it saw when the device has the capability, and raises when not


def _autocast(dtype_name: str) -> Callable[[_Probe], str]:
    def probe(p: _Probe) -> str:
        torch = p.torch
        dtype = getattr(torch, dtype_name)
        if not torch.amp.is_autocast_available(p.device_type):
            raise _Missing(
                f"torch.autocast does not support {p.device_type!r} "
                f"(torch.amp.is_autocast_available({p.device_type!r}) is False)"
            )
        a = torch.ones(4, 4, device=p.device)
        with torch.autocast(p.device_type, dtype=dtype):
            result = a @ a
        called = (
            f"a float32 matmul under torch.autocast({p.device_type!r}, dtype=torch.{dtype_name})"
        )
        if result.dtype != dtype:
            raise _Missing(
                f"{called} gave {result.dtype}: the device's autocast does not cast to it"
            )
        return f"{called} ran in torch.{dtype_name}"

    return probe


def _rng_state(p: _Probe) -> str:
    torch = p.torch
    if p.module is None:
        get, put, where = torch.get_rng_state, torch.set_rng_state, "torch.get_rng_state()"
    else:
        index = p.device.index or 0
        if not callable(getattr(p.module, "get_rng_state", None)):
            raise _Missing(f"{p.module.__name__} has no get_rng_state (nor torch.{p.device_type})")

        def get() -> Any:
            return p.module.get_rng_state(index)

        def put(state: Any) -> None:
            p.module.set_rng_state(state, index)

        where = f"torch.{p.device_type}.get_rng_state({index})"
    state = get()
    first = torch.rand(8, device=p.device).cpu()
    advanced = not torch.equal(get(), state)
    put(state)
    again = torch.rand(8, device=p.device).cpu()
    if not torch.equal(first, again):
        hint = "" if advanced else " (the draw left that state as it was: it comes from elsewhere)"
        raise _Missing(f"restoring {where} did not reproduce a torch.rand draw on {p.device}{hint}")
    return f"restoring {where} reproduced a torch.rand draw on {p.device}"


def _memory_stats(p: _Probe) -> str:
    torch = p.torch
    if p.device_type == "cpu":
        raise _Missing("cpu has no device memory figures (torch.accelerator covers accelerators)")
    current = torch.accelerator.current_accelerator()
    if current is None or current.type != p.device_type:
        seen = "none" if current is None else repr(current.type)
        raise _Missing(
            f"torch.accelerator's current accelerator is {seen}, not {p.device_type!r}: its "
            "memory figures are not this device's"
        )
    index = p.device.index or 0
    held = torch.ones(1024, device=p.device)
    allocated = torch.accelerator.memory_allocated(index)
    stats = torch.accelerator.memory_stats(index)
    del held
    if not isinstance(allocated, int) or allocated <= 0:
        raise _Missing(
            f"torch.accelerator.memory_allocated({index}) is {allocated!r} with 4 KiB allocated"
        )
    return (
        f"torch.accelerator.memory_allocated({index}) = {allocated} bytes, "
        f"memory_stats({index}) has {len(stats)} figures"
    )


def _device_streams(p: _Probe) -> str:
    module = p.torch.cpu if p.device_type == "cpu" else p.module
    if module is None:
        raise _Missing(
            f"torch has no module torch.{p.device_type}, where FSDP2 looks for "
            f"{', '.join(_STREAM_NAMES)}"
        )
    missing: list[str] = []
    first_error = ""
    for name in _STREAM_NAMES:
        try:
            getattr(module, name)
        except AttributeError as exc:
            missing.append(name)
            first_error = first_error or str(exc)
    if missing:
        also = f" (nor {', '.join(repr(n) for n in missing[1:])})" if missing[1:] else ""
        raise _Missing(
            f"{first_error}{also}; FSDP2 takes Stream, Event and current_stream from "
            f"torch.{p.device_type}"
        )
    # What FSDP2 does with them: side streams of high priority, events recorded and waited on.
    side = module.Stream(priority=-1)
    event = module.Event()
    event.record()
    current = module.current_stream()
    current.wait_event(event)
    current.wait_stream(side)
    return (
        f"torch.{p.device_type}.Stream(priority=-1), Event().record() and "
        "current_stream().wait_event / wait_stream ran"
    )


def _storage_resize(p: _Probe) -> str:
    tensor = p.torch.empty(16, device=p.device)
    storage = tensor.untyped_storage()
    size = storage.size()
    storage.resize_(0)  # FSDP2 frees an unsharded parameter so, and brings it back below
    storage.resize_(size)
    if storage.size() != size:
        raise _Missing(f"untyped_storage().resize_({size}) left {storage.size()} bytes")
    return f"a {p.device_type} tensor's untyped_storage().resize_(0) and back to {size} bytes ran"


def _ddp(p: _Probe) -> str:
    torch = p.torch
    p.group()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).to(p.device))
    model(torch.ones(3, 4, device=p.device)).sum().backward()
    grad = model.module.weight.grad
    if grad is None:
        raise _Missing("DistributedDataParallel's backward left no gradient")
    return f"DistributedDataParallel ran a step on a 1-process {p.backend!r} group"


def _collective(name: str, single: str, legacy: str) -> Callable[[_Probe], str]:
    def probe(p: _Probe) -> str:
        import torch.distributed as dist

        torch = p.torch
        group = p.group()
        # FSDP2 calls the *_single form where torch has it (2.13 deprecates the other name).
        function = getattr(dist, single, None) or getattr(dist, legacy)
        data = torch.arange(4, dtype=torch.float32, device=p.device)
        out = torch.zeros(4, device=p.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            function(out, data, group=group)
        if not torch.equal(out.cpu(), data.cpu()):
            raise _Missing(
                f"torch.distributed.{function.__name__} on 1 process gave {out.cpu().tolist()}"
            )
        return f"torch.distributed.{function.__name__} ran on a 1-process {p.backend!r} group"

    probe.__name__ = f"_{name}"
    return probe


def _in_place_collective(name: str) -> Callable[[_Probe], str]:
    """Return the probe that runs ``broadcast`` or ``all_reduce`` on the 1-process group.

    ``broadcast`` is from rank 0, ``all_reduce`` a sum: on one process each leaves the tensor as it
    was."""

    def probe(p: _Probe) -> str:
        import torch.distributed as dist

        torch = p.torch
        group = p.group()
        data = torch.arange(4, dtype=torch.float32, device=p.device)
        if name == "broadcast":
            dist.broadcast(data, src=0, group=group)
        else:
            dist.all_reduce(data, group=group)
        if not torch.equal(data.cpu(), torch.arange(4, dtype=torch.float32)):
            raise _Missing(f"torch.distributed.{name} on 1 process gave {data.cpu().tolist()}")
        return f"torch.distributed.{name} ran on a 1-process {p.backend!r} group"

    probe.__name__ = f"_{name}"
    return probe


def _deepspeed(row: str) -> Callable[[_Probe], str]:
    """Return the probe of a row of the DeepSpeed bridge's compiled ops on this machine.

    Facts of the bridge's rules (:mod:`._deepspeed_builds`) and of this machine, read without
    DeepSpeed."""

    def probe(p: _Probe) -> str:
        from ._deepspeed import builds

        rows = {"device": builds.device_ops_row, "host": builds.host_ops_row}
        supported, reason = rows[row](p.device_type)
        if not supported:
            raise _Missing(reason)
        return reason

    probe.__name__ = f"_deepspeed_{row}_ops"
    return probe


def _compile(p: _Probe) -> str:
    torch = p.torch
    data = torch.arange(4, dtype=torch.float32, device=p.device)
    try:
        eager = torch.compile(lambda x: x * 2 + 1, backend="eager")(data)
    except Exception as exc:
        raise _Missing(f"torch.compile(backend='eager') failed: {describe_exception(exc)}") from exc
    if not torch.equal(eager.cpu(), (data * 2 + 1).cpu()):
        raise _Missing("torch.compile(backend='eager') gave a wrong result")
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

    init_backend_registration()
    if get_scheduling_for_device(p.device_type) is None:
        raise _Missing(
            f"eager fallback only: torch.compile(backend='eager') ran, but inductor has no code "
            f"generator registered for {p.device_type!r} (register_backend_for_device), so "
            "the default backend fails"
        )
    return (
        f"inductor has a code generator registered for {p.device_type!r}, and "
        "torch.compile(backend='eager') ran"
    )


def _kernels(p: _Probe) -> Capability:
    from ._kernels.probe import probe_kernels

    gaps, failed = KernelGaps(), ""
    if p.kernel_gaps is not None:
        try:
            gaps = p.kernel_gaps()
        except Exception as exc:  # the plugin's hook: its failure is said, the probe goes on
            failed = f" (the plugin's kernel_gaps() failed, so none are declared: {one_line(exc)})"
    found = probe_kernels(p.device, gaps)
    return Capability(
        "kernels",
        not found.missing,
        found.reason + failed,
        missing_kernels=found.missing,
        kernel_cases=found.cases,
        kernel_gaps=None if failed else gaps,
    )


_PROBES: dict[str, Callable[[_Probe], str | Capability]] = {
    "bf16-autocast": _autocast("bfloat16"),
    "fp16-autocast": _autocast("float16"),
    "rng-state": _rng_state,
    "memory-stats": _memory_stats,
    "device-streams": _device_streams,
    "storage-resize": _storage_resize,
    "ddp": _ddp,
    "all-gather-into-tensor": _collective(
        "all_gather", "all_gather_single", "all_gather_into_tensor"
    ),
    "reduce-scatter-tensor": _collective(
        "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor"
    ),
    "broadcast": _in_place_collective("broadcast"),
    "all-reduce": _in_place_collective("all_reduce"),
    "compile": _compile,
    "deepspeed-device-ops": _deepspeed("device"),
    "deepspeed-host-ops": _deepspeed("host"),
    "kernels": _kernels,
}


def _run(name: str, probe: _Probe) -> Capability:
    try:
        seen = _PROBES[name](probe)
    except _Missing as missing:
        return Capability(name, False, str(missing))
    except Exception as exc:  # the device's own words
        return Capability(name, False, describe_exception(exc))
    return seen if isinstance(seen, Capability) else Capability(name, True, seen)


def iter_capabilities(
    device_type: str,
    backend: str | None,
    *,
    kernel_gaps: Callable[[], KernelGaps] | None = None,
) -> Iterator[Capability]:
    """Yield the rows of :func:`probe_capabilities` one at a time.

    In the order of :data:`CAPABILITIES`: a process that reports each row as it comes leaves the
    finished ones behind if a probe crashes it. The process group, made on first need, is destroyed
    when the iteration ends.

    :raises RuntimeError: when this process already has a default process group (probing makes
        a 1-process group of its own).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        raise RuntimeError(
            "probe_capabilities makes a 1-process group of its own, and this process already "
            "has a default process group: probe in a fresh process (accelctl validate "
            "--capabilities does)"
        )
    probe = _Probe(device_type, backend, kernel_gaps)
    try:
        for name in CAPABILITIES:
            yield _run(name, probe)
    finally:
        probe.close()


def probe_capabilities(
    device_type: str,
    backend: str | None,
    *,
    kernel_gaps: Callable[[], KernelGaps] | None = None,
) -> tuple[Capability, ...]:
    """Probe every row of the capability matrix in this process, on the current device.

    The rows are :data:`CAPABILITIES`. The current device of ``device_type`` is its module's
    ``current_device()``, else 0; ``"cpu"``: the CPU. The collective rows run on a 1-process group
    on ``backend`` (``init_process_group(backend, store=HashStore(), rank=0, world_size=1)``),
    destroyed after; ``backend=None`` (one process only) makes them a "no" that says so.
    ``kernel_gaps``: the plugin's hook (its declared gaps go into the ``kernels`` row); None: none
    declared.

    A probe can load a device runtime and leave state behind (a compiled function, the device's
    random state drawn from), so the kit runs it in a fresh process per plugin.
    """
    return tuple(iter_capabilities(device_type, backend, kernel_gaps=kernel_gaps))


def fsdp_gaps(device_type: str, backend: str | None) -> tuple[Capability, ...]:
    """Return the FSDP2 needs that ``device_type`` lacks, checked without a process group.

    The needs are :data:`FSDP_NEEDS`; ``()`` when FSDP2 can be tried. The device module's
    ``Stream``/``Event``/``current_stream`` and storage resize are run on the device; the
    collectives are checked by the backend's registration for the device type only (running them
    needs a group: :func:`probe_capabilities`). Cheap enough to run once before a launch; it
    allocates a small tensor on the current device, so it starts the device's runtime in the calling
    process (not for a parent that forks its workers afterwards).
    """
    probe = _Probe(device_type, backend)
    gaps = [
        capability
        for capability in (_run("device-streams", probe), _run("storage-resize", probe))
        if not capability.supported
    ]
    if backend is None:
        why = "no distributed backend (distributed_backend is None): one process only"
    else:
        why = _backend_gap(backend, device_type) or ""
    if why:
        gaps += [Capability(name, False, why) for name in FSDP_NEEDS[2:]]
    return tuple(gaps)

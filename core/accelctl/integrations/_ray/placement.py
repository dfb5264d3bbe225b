"""Inside a Ray Train worker: which device of its node it takes, and the hand-over to accelctl.

Ray Train starts the workers and tells each its ranks (``ray.train.get_context()``); it knows
nothing of an accelctl plugin's devices, and sets no visibility variable for a custom resource.
So every worker of a run on a node sees all of the node's devices, and takes the one of its local
rank, as under ``accelctl launch``: the first ``local_world_size`` devices, one each. What it
took is kept for this process (:func:`current`), for the training function's context, for
:func:`accelctl.integrations.ray.get_device`, and, through the variables ``accelctl launch``
hands its children, for an :class:`accelctl.Trainer` made inside the training function.

No Ray here: the backend passes the ranks in (the module stays testable in-process).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import accelctl
from accelctl._choice.selection import (
    known_name,  # the name a message uses: "openreg", not "privateuse1"
)
from accelctl._contract import (
    settings as _settings,  # the same distribution: released with the core
)
from accelctl._kernels.setup import set_up_kernels
from accelctl._kernels.translate import missing_kernel_error

from .resources import resource_name

if TYPE_CHECKING:
    import torch

#: torchrun's count of the group's restarts, which makes ``Trainer.fit`` continue its run from
#: that run's ``last.ckpt`` by itself (docs/training.md, "Restarts"); here Ray Train's restarts
#: of the worker group after a failure.
RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"


@dataclass(frozen=True)
class Placement:
    """Where this worker runs: the accelerator's handle, its device, the group's backend."""

    accelerator: accelctl.AcceleratorHandle
    device: torch.device
    #: The accelerator's ``torch.distributed`` backend (None: one process only).
    backend: str | None
    #: The Ray resource that counts its devices on a node (None: the accelerator counts
    #: processes, as the CPU does).
    resource: str | None


_current: Placement | None = None


@dataclass(frozen=True)
class WorkerRanks:
    """This worker among the workers of one Ray Train run (``ray.train.get_context()``)."""

    world_rank: int
    local_rank: int
    local_world_size: int
    world_size: int
    #: The node's address, for messages.
    node: str
    #: The Ray nodes running on this worker's host (several ``ray start`` on one machine).
    nodes_on_host: int = 1


def place(
    accelerator: Any, ranks: WorkerRanks, restarts: int, launch: str | None = None
) -> Placement:
    """Take this worker's device and hand the choice to accelctl.

    The worker group's start calls it in every worker before the process group is made.

    :param accelerator: what :func:`accelctl.resolve` takes.
    :param restarts: how many times Ray Train has started this run's worker group again.
    :param launch: this Ray Train run's id, the same at every start of its worker group: the
        ``ACCELCTL_LAUNCH_ID`` by which a restarted ``Trainer.fit`` finds its own run folder.
    :raises accelctl.AccelctlError: accelctl's own error when the node cannot give this worker a
        device (the plugin is missing or unavailable here, more workers of the run on this node
        than it has devices, several workers on an accelerator without a distributed backend),
        its message saying which worker and node.
    """
    global _current
    where = (
        f"Ray Train worker {ranks.world_rank} (node {ranks.node}, local rank {ranks.local_rank})"
    )
    try:
        # One device per worker of this run on this node, the first ones: devices[local_rank].
        selection = accelctl.resolve(accelerator, ranks.local_world_size)
    except accelctl.DeviceSpecError as exc:
        handle = accelctl.resolve(accelerator, 1).accelerator
        wanted = resource_name(handle)
        if ranks.nodes_on_host > 1:
            raise accelctl.ProcessSetupError(
                f"{where}: {ranks.nodes_on_host} Ray nodes run on this host ({ranks.node}), and "
                f"Ray Train numbers the workers of one host together (their local ranks, by "
                f"address), so they share its devices: it placed {ranks.local_world_size} "
                f"workers of this run here, one device each, but {exc}. The nodes of one host "
                f"must together advertise at most its devices: ray start --resources "
                f'"$(accelctl ray-resources)" on one of them, and no {wanted!r} on the others'
            ) from exc
        raise accelctl.ProcessSetupError(
            f"{where}: Ray Train placed {ranks.local_world_size} workers of this run on this "
            f"node, one device each, but {exc}. Advertise each node's devices (ray start "
            f'--resources "$(accelctl ray-resources)") and ask for one per worker: '
            f"ScalingConfig(resources_per_worker={{{wanted!r}: 1}})"
        ) from exc
    except accelctl.AccelctlError as exc:
        raise type(exc)(f"{where}: {exc}") from exc
    handle = selection.accelerator
    backend = handle.info.distributed_backend
    if backend is None and ranks.world_size > 1:
        raise accelctl.ProcessSetupError(
            f"{where}: accelerator {known_name(handle, accelerator)!r} runs in a single process "
            f"only (its distributed_backend is None), but Ray Train started {ranks.world_size} "
            f"workers; use ScalingConfig(num_workers=1), or an accelerator with a distributed "
            f"backend"
        )
    device = selection.devices[ranks.local_rank]
    handle.setup_device(device)
    set_up_kernels(handle, device, rank=ranks.world_rank)  # ACCELCTL_CPU_FALLBACK, on this node
    # What `accelctl launch` hands its children: a Trainer() inside the training function runs
    # on this choice (Ray itself sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_*).
    if handle.entry_point is not None:  # an instance without one is passed to the Trainer
        os.environ[_settings.ACCELERATOR] = handle.plugin_name
    os.environ[_settings.DEVICES] = str(ranks.local_world_size)
    os.environ[RESTART_COUNT] = str(restarts)
    if launch is not None:
        os.environ[_settings.LAUNCH_ID] = launch
    resource = resource_name(handle) if isinstance(selection.parsed, list) else None
    _current = Placement(handle, device, backend, resource)
    return _current


def check_resources(resources_per_worker: dict[str, float], resources: set[str]) -> None:
    """Refuse a run whose workers do not each ask for one unit of the device resource.

    The resource counts the devices they take. Otherwise Ray would put more workers on a node than
    it has devices, or leave devices idle.

    :param resources_per_worker: the run's ``ScalingConfig(resources_per_worker=...)``.
    :param resources: what the workers' placements say counts their devices.
    :raises accelctl.ProcessSetupError: naming the resource and the line to write.
    """
    for name in sorted(resources):
        asked = resources_per_worker.get(name, 0)
        if asked != 1:
            raise accelctl.ProcessSetupError(
                f"each Ray Train worker takes one device, which the nodes advertise as the Ray "
                f"resource {name!r} (accelctl ray-resources), but the run asks for {asked:g} of "
                f"it per worker (ScalingConfig(resources_per_worker={resources_per_worker!r})): "
                f"ask for one, resources_per_worker={{..., {name!r}: 1}}, so that Ray puts at "
                f"most as many workers on a node as it has devices"
            )


def shared_hosts(nodes: list[dict[str, Any]], resource: str) -> str | None:
    """Warn where several Ray nodes of one host each advertise ``resource``; else None.

    The nodes are live; ``resource`` is the devices of the host, counted once per node. Ray may
    then place more workers on the host than it has devices, and such a run is refused.

    :param nodes: ``ray.nodes()``.
    """
    hosts: dict[str, list[float]] = {}
    for node in nodes:
        count = node.get("Resources", {}).get(resource)
        if node.get("Alive") and count:
            hosts.setdefault(str(node.get("NodeManagerAddress")), []).append(float(count))
    shared = {host: counts for host, counts in hosts.items() if len(counts) > 1}
    if not shared:
        return None
    listed = "; ".join(
        f"{host}: {len(counts)} nodes advertising {', '.join(f'{c:g}' for c in counts)}"
        for host, counts in sorted(shared.items())
    )
    return (
        f"several Ray nodes on one host each advertise the resource {resource!r} ({listed}). "
        f"Ray Train numbers the workers of one host together and they share its devices: "
        f"where the nodes of a host advertise more than it has, a run that Ray places on more "
        f"workers than devices there is refused. Advertise a host's devices once, on one of "
        f"its nodes (docs/ray.md, Limits)"
    )


def current() -> Placement:
    """This worker's placement.

    :raises accelctl.ProcessSetupError: outside a worker of a Ray ``TorchTrainer`` whose
        ``torch_config`` is :class:`accelctl.integrations.ray.TorchConfig`.
    """
    if _current is None:
        raise accelctl.ProcessSetupError(
            "this process is not a Ray Train worker placed by accelctl: call it inside the "
            "training function of a ray.train.torch.TorchTrainer made with "
            "torch_config=accelctl.integrations.ray.TorchConfig(<accelerator>)"
        )
    return _current


@contextlib.contextmanager
def on_device() -> Iterator[None]:
    """Set up this worker's device around the training function, in its own thread.

    A current device is per thread. The plugin's ``setup_device`` for this worker's device, and its
    ``teardown`` afterwards.

    A kernel the device lacks that stops the function leaves it as
    :class:`accelctl.MissingKernelError` (:func:`missing_kernel`), without the error torch
    raised behind it: Ray logs the worker's error with its traceback, and the driver shows the
    line (``ACCELCTL_DEBUG=1``: the whole chain)."""
    placement = current()
    placement.accelerator.setup_device(placement.device)
    try:
        yield
    except Exception as exc:
        error = missing_kernel(exc, placement)
        if error is None:
            raise
        if _settings.debug():
            raise error from exc
        raise error from None
    finally:
        placement.accelerator.teardown()


def missing_kernel(exc: Exception, placement: Placement) -> accelctl.MissingKernelError | None:
    """Return accelctl's error where ``exc`` is a kernel the worker's device lacks, else None.

    ``exc`` is the Trainer's own, or torch's from a hand-written loop. The way to the CPU is in
    Ray Train's words."""
    error = missing_kernel_error(
        exc, accelerator=placement.accelerator.plugin_name, device=placement.device
    )
    if error is None or error.op is None or error.cpu_way is not None:
        return error
    way = 'pass TorchConfig("cpu")'
    if placement.resource is not None:
        way += f" and leave {placement.resource!r} out of ScalingConfig(resources_per_worker=...)"
    return accelctl.MissingKernelError.from_parts({**error.parts(), "cpu_way": way})


def check_config(
    accelerator: Any, init_method: Any, timeout_s: Any, report: Any, report_checkpoints: Any
) -> None:
    """Refuse in the driver what a worker would refuse only once the group has started.

    Done where the ``TorchConfig`` is made.

    :raises TypeError: an accelerator that is neither a name nor an ``accelctl.Accelerator``,
        a flag that is not a bool.
    :raises ValueError: an empty name, an ``init_method`` other than ``"env"`` or ``"tcp"``, a
        ``timeout_s`` that is not a positive whole number.
    """
    if isinstance(accelerator, str):
        if not accelerator.strip():
            raise ValueError(
                "TorchConfig(accelerator='') names no accelerator: give a name or alias "
                "('npu'), 'gpu', 'auto', or an accelctl.Accelerator instance"
            )
    elif not isinstance(accelerator, accelctl.Accelerator):
        raise TypeError(
            f"TorchConfig(accelerator={accelerator!r}): give a name or alias ('npu'), 'gpu', "
            f"'auto', or an accelctl.Accelerator instance, not {type(accelerator).__name__}"
        )
    if init_method not in ("env", "tcp"):
        raise ValueError(f"TorchConfig(init_method={init_method!r}): Ray takes 'env' or 'tcp'")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int) or timeout_s <= 0:
        raise ValueError(
            f"TorchConfig(timeout_s={timeout_s!r}): the seconds a collective may wait, a "
            f"positive whole number"
        )
    for name, value in (("report", report), ("report_checkpoints", report_checkpoints)):
        if not isinstance(value, bool):
            raise TypeError(f"TorchConfig({name}={value!r}): True or False")

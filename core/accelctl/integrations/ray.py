"""Ray Train's ``TorchTrainer`` on any accelctl accelerator, with no change to Ray.

::

    # on each node: advertise its devices to Ray
    #   ray start --address HEAD:6379 --resources "$(accelctl ray-resources)"
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    from accelctl.integrations.ray import TorchConfig

    trainer = TorchTrainer(
        train_fn,
        torch_config=TorchConfig("npu"),
        scaling_config=ScalingConfig(num_workers=8, resources_per_worker={"npu": 1}),
    )

Ray Train picks a worker's device from the accelerators Ray knows (GPU, HPU, NPU, TPU) and falls
back to the CPU; it sets no visibility variable for a custom resource, and passes a backend name
straight to ``init_process_group``. :class:`TorchConfig` (a ``ray.train.torch.TorchConfig``) puts
the plugin's choice in its place: each worker takes the device of its local rank from the plugin
(its ``setup_device`` hook), the group joins the plugin's ``distributed_backend``, and a worker
the node cannot serve is refused with accelctl's error before the group is made. Inside the
training function, ``accelctl.Trainer()`` runs on that device (it sees Ray's worker as a launched
rank and takes the group Ray made), and a hand-written loop uses :func:`get_device`,
:func:`prepare_model` and :func:`prepare_data_loader` where it would use Ray's. After a failure
that Ray restarts the workers for (``FailureConfig(max_failures=N)``), ``Trainer.fit`` resumes
its run from that run's ``last.ckpt`` by itself, as after torchrun's restarts. ``docs/ray.md``
has the whole story.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from ._ray.adaptation import ADAPTATION

try:
    # Before anything of Ray: a release the bridge cannot run on is refused here.
    ADAPTATION.require()
    import ray
    import ray.train
    import ray.train.torch
    from ray.train.torch.config import _TorchBackend
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without Ray
    from ._shared.missing import framework_missing

    raise framework_missing("ray", "Ray Train", exc) from exc

import torch

import accelctl
from accelctl._contract import (
    settings as _settings,  # the one reader of ACCELCTL_*: the same distribution
)
from accelctl._contract.errors import warn_user
from accelctl._launching.error_line import show_as_one_line
from accelctl._training.callbacks import add_process_callback
from accelctl._training.data import move_to_device  # the Trainer's: the same distribution

from ._ray import placement as _ray_placement
from ._ray.checkpoints import resume_from
from ._ray.report import RayReport, run_id
from ._ray.resources import ray_resources

__all__ = ["ADAPTATION", "ADAPTED", "TorchConfig", "dataset_loader", "get_device",
           "prepare_data_loader", "prepare_model", "ray_resources"]  # fmt: skip

#: True: importing the bridge refuses a release it cannot adapt (see :data:`ADAPTATION`).
ADAPTED: bool = ADAPTATION.refusal == ""


class TorchConfig(ray.train.torch.TorchConfig):  # type: ignore[misc]  # Any to mypy
    """``ray.train.torch.TorchConfig`` whose workers run on an accelctl accelerator.

    :param accelerator: what :func:`accelctl.resolve` takes, resolved in each worker on its own
        node: ``"auto"`` (``ACCELCTL_ACCELERATOR`` when set on the node, else the available
        accelerator of highest priority), ``"gpu"``, a name or alias (``"npu"``, ``"openreg"``),
        or an :class:`accelctl.Accelerator` instance.
    :param init_method: Ray's: ``"env"`` or ``"tcp"``.
    :param timeout_s: Ray's: seconds a collective of the group may wait.
    :param report: an :class:`accelctl.Trainer` in the workers reports its figures to Ray Train
        (``ray.train.report``) at each line of ``metrics.jsonl`` and each checkpoint, so that
        ``Result.metrics``, Ray Tune and the dashboard see them; False: it reports nothing.
    :param report_checkpoints: with ``report``, rank 0 also passes each checkpoint the Trainer
        writes (a ``ray.train.Checkpoint``, copied into ``RunConfig(storage_path)``), so that
        ``Result.checkpoint`` is its last and a new ``fit()`` of the run resumes from it.

    ``ACCELCTL_CPU_FALLBACK=1`` where the config is made (the driver) runs the kernels the
    workers' devices lack on the CPU (docs/missing-kernels.md), as the variable set on a node
    does. A worker stopped by a missing kernel fails the run with accelctl's
    :class:`~accelctl.MissingKernelError` in Ray's ``WorkerGroupError.worker_failures``; a
    driver that ends on it shows accelctl's one line, not Ray's traceback.

    Each worker takes ``devices[local_rank]`` of its node (the first devices, one per worker of
    the run there), the group's backend is the plugin's ``distributed_backend``; Ray's own
    ``backend`` argument is therefore not taken.

    :raises TypeError: for ``backend=``, and an ``accelerator`` that is neither a name nor an
        :class:`accelctl.Accelerator`.
    :raises ValueError: for an ``init_method`` or ``timeout_s`` Ray would refuse only once the
        workers run.
    """

    def __init__(
        self,
        accelerator: Any = "auto",
        *,
        init_method: str = "env",
        timeout_s: int = 1800,
        report: bool = True,
        report_checkpoints: bool = True,
        **kwargs: Any,
    ) -> None:
        # Refused here, in the driver: in a worker they would come after the group started.
        if "backend" in kwargs:
            raise TypeError(_backend_refusal(accelerator, kwargs["backend"]))
        _ray_placement.check_config(accelerator, init_method, timeout_s, report, report_checkpoints)
        super().__init__(backend=None, init_method=init_method, timeout_s=timeout_s, **kwargs)
        #: The accelerator asked for, resolved in each worker.
        self.accelerator = accelerator
        #: Whether the workers' Trainer reports to Ray Train, and its checkpoints too.
        self.report, self.report_checkpoints = report, report_checkpoints
        #: ``ACCELCTL_CPU_FALLBACK`` in the driver, turned on in every worker where it is on.
        self.cpu_fallback = _settings.cpu_fallback()
        show_as_one_line(carried=_worker_missing_kernel)

    @property
    def backend_cls(self) -> type[_TorchBackend]:
        return _AccelctlBackend

    @property
    def train_func_context(self) -> Any:
        return _ray_placement.on_device

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "accelerator": str(self.accelerator),
                "report": self.report, "report_checkpoints": self.report_checkpoints,
                "cpu_fallback": self.cpu_fallback}  # fmt: skip


def _backend_refusal(accelerator: Any, backend: Any) -> str:
    """Return the ``backend=`` refusal, suggesting the config for what was asked.

    The accelerator given, else the installed accelerators (here, in the driver) whose backend
    ``backend`` is."""
    named = accelerator if isinstance(accelerator, str) else None
    if named is None or named.strip().lower() == "auto":
        try:
            owners = [s.name for s in accelctl.list_accelerators()
                      if s.info is not None and s.info.distributed_backend == backend]  # fmt: skip
        except Exception:  # a hint only: never the reason the refusal fails
            owners = []
        named = owners[0] if len(owners) == 1 else None
    if isinstance(accelerator, accelctl.Accelerator):
        suggestion = f"TorchConfig({type(accelerator).__name__}())"
    elif named is not None:
        suggestion = f"TorchConfig({named!r})"
    else:
        suggestion = "TorchConfig('<accelerator>') (accelctl list names them)"
    return (
        f"TorchConfig(backend={backend!r}) is the plugin's choice here (its distributed_backend, "
        f"read on each worker's node); name the accelerator instead: {suggestion}"
    )


class _AccelctlBackend(_TorchBackend):  # type: ignore[misc]  # Any to mypy
    """Ray's torch backend, after each worker has taken its device from the plugin.

    Ray makes one object of a backend class per process (``Backend`` is a singleton), and Ray
    Train runs each run's controller, which calls it, in a process of its own: the object counts
    the starts of this run's worker group, the first and every restart after a failure."""

    def __init__(self) -> None:
        super().__init__()
        self._starts = 0

    def on_start(self, worker_group: Any, backend_config: ray.train.BackendConfig) -> None:
        assert isinstance(backend_config, TorchConfig)  # backend_cls is TorchConfig's alone
        restarts, self._starts = self._starts, self._starts + 1
        placed = worker_group.execute(
            _place_worker,
            backend_config.accelerator,
            restarts,
            backend_config.report,
            backend_config.report_checkpoints,
            backend_config.cpu_fallback,
        )
        backends = {backend for backend, _ in placed}
        if len(backends) > 1:
            raise accelctl.ProcessSetupError(
                f"the workers' nodes disagree on the distributed backend of "
                f"{backend_config.accelerator!r} ({', '.join(sorted(map(str, backends)))}): "
                f"install the same plugin version on every node"
            )
        resources = {resource for _, resource in placed if resource is not None}
        _ray_placement.check_resources(worker_group.get_resources_per_worker(), resources)
        for resource in sorted(resources):
            shared = _ray_placement.shared_hosts(ray.nodes(), resource)
            if shared is not None:
                warn_user(shared)
        own = ray.train.torch.TorchConfig(
            backend=backends.pop() or "gloo",  # None: one worker, checked where it was placed
            init_method=backend_config.init_method,
            timeout_s=backend_config.timeout_s,
        )
        super().on_start(worker_group, own)
        # Ray points Accelerate at its own device choice (the CPU for a chip it does not know).
        worker_group.execute(_point_accelerate_at_the_device)


def _place_worker(
    accelerator: Any, starts: int, report: bool, report_checkpoints: bool, cpu_fallback: bool
) -> tuple[str | None, str | None]:
    """Place a worker on its device and hand its fits the run's id, restarts and checkpoint.

    The worker takes its device (:func:`._ray.placement.place`) and installs
    the reporter; returns its backend and the resource that counts its devices, for the checks
    across the workers. ``cpu_fallback``: the driver's ``ACCELCTL_CPU_FALLBACK``, on here too where
    it is on."""
    if cpu_fallback:
        os.environ[_settings.CPU_FALLBACK] = "1"
    context = ray.train.get_context()
    node = ray.util.get_node_ip_address()
    ranks = _ray_placement.WorkerRanks(
        world_rank=context.get_world_rank(),
        local_rank=context.get_local_rank(),
        local_world_size=context.get_local_world_size(),
        world_size=context.get_world_size(),
        node=node,
        nodes_on_host=sum(1 for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == node),
    )
    launch = run_id(context)
    resume = resume_from(ray.train.get_checkpoint(), starts)
    placement = _ray_placement.place(accelerator, ranks, resume.restarts, launch)
    # Where the fit's run folder has no checkpoint of this run (a new root_dir, a lost one):
    # Ray's. A ckpt_path the script gives, or ACCELCTL_CKPT_PATH set for the workers, wins.
    if resume.checkpoint is not None and _settings.ckpt_path() is None:
        os.environ[_settings.CKPT_PATH] = str(resume.checkpoint)
    if report:
        add_process_callback(RayReport(launch, resume.restarts, checkpoints=report_checkpoints))
    return placement.backend, placement.resource


def _worker_missing_kernel(exc: BaseException) -> accelctl.MissingKernelError | None:
    """Return the missing-kernel error that stopped a worker of the failed run, or None.

    The :class:`~accelctl.MissingKernelError` of the run whose failure ``exc`` is: Ray Train's
    ``WorkerGroupError`` carries each failed worker's error in ``worker_failures`` (world rank ->
    error); the lowest rank's. None where no worker's was."""
    failures = getattr(exc, "worker_failures", None)
    if not isinstance(failures, Mapping):
        return None
    for rank in sorted(failures):
        error = failures[rank]
        if isinstance(error, accelctl.MissingKernelError):
            return error
    return None


def _point_accelerate_at_the_device() -> None:
    os.environ["ACCELERATE_TORCH_DEVICE"] = str(_ray_placement.current().device)


def get_device() -> torch.device:
    """Return this worker's device, as the plugin gave it.

    ``ray.train.torch.get_device`` answers the CPU for a chip Ray does not know.

    :raises accelctl.ProcessSetupError: outside a worker started with :class:`TorchConfig`.
    """
    return _ray_placement.current().device


def prepare_model(
    model: torch.nn.Module,
    parallel_strategy: str | None = "ddp",
    parallel_strategy_kwargs: dict[str, Any] | None = None,
) -> torch.nn.Module:
    """Run ``ray.train.torch.prepare_model`` on this worker's device.

    The model moved there and, with several workers, wrapped in ``DistributedDataParallel`` over the
    group Ray made with the plugin's backend."""
    prepared: torch.nn.Module = ray.train.torch.prepare_model(
        model,
        move_to_device=get_device(),
        parallel_strategy=parallel_strategy,
        parallel_strategy_kwargs=parallel_strategy_kwargs,
    )
    return prepared


def prepare_data_loader(
    data_loader: torch.utils.data.DataLoader[Any],
    add_dist_sampler: bool = True,
    move_to_device: bool = True,
) -> Any:
    """Run ``ray.train.torch.prepare_data_loader`` on this worker's device.

    With several workers, each reads its share of the data (a ``DistributedSampler``, as Ray adds
    it), and with ``move_to_device`` every batch arrives on the device (Ray's own loader can move
    batches only to the devices Ray knows). Call ``loader.sampler.set_epoch(epoch)`` each epoch, as
    with Ray's."""
    loader = ray.train.torch.prepare_data_loader(
        data_loader, add_dist_sampler=add_dist_sampler, move_to_device=False
    )
    return _OnDevice(loader, get_device()) if move_to_device else loader


def dataset_loader(shard: Any = "train", **iter_torch_batches: Any) -> Any:
    """Return a Ray Data shard as a loader for :meth:`accelctl.Trainer.fit`.

    A torch ``DataLoader`` over an ``IterableDataset`` whose every pass is one
    ``iter_torch_batches`` of the shard.

    :param shard: the dataset's name in ``TorchTrainer(datasets=...)`` (its
        ``ray.train.get_dataset_shard``), or the shard itself.
    :param iter_torch_batches: passed to the shard's ``iter_torch_batches`` (``batch_size``,
        ``drop_last``, ``local_shuffle_buffer_size``, ``collate_fn``, ...).

    The shard is this worker's share already: the Trainer leaves it as it is (no
    ``DistributedSampler``), and Ray Data gives every worker as many rows (``DataConfig``'s
    equal split, Ray Train's default), so that the workers take their steps together. A resumed
    fit restores the weights, optimizer, step and random states exactly, but not the shard's
    order: docs/ray.md, "Ray Data".
    """
    import torch.utils.data

    iterator = ray.train.get_dataset_shard(shard) if isinstance(shard, str) else shard
    if iterator is None:
        raise accelctl.DataLoaderError(
            f"ray.train.get_dataset_shard({shard!r}) is None: give the dataset to the trainer, "
            f"TorchTrainer(..., datasets={{{shard!r}: ray.data.from_...(...)}})"
        )

    class _Shard(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Any]:
            return iter(iterator.iter_torch_batches(**iter_torch_batches))

    # batch_size=None: the shard's batches pass through as they are.
    return torch.utils.data.DataLoader(_Shard(), batch_size=None)


class _OnDevice:
    """A data loader whose batches arrive on ``device``.

    Every other attribute is the loader's (``sampler``, ``dataset``, ``batch_size``)."""

    def __init__(self, loader: torch.utils.data.DataLoader[Any], device: torch.device) -> None:
        self._loader, self._device = loader, device

    def __iter__(self) -> Iterator[Any]:
        for batch in self._loader:
            yield move_to_device(batch, self._device)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

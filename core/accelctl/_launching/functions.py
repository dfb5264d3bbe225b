"""``accelctl.launch(fn)``: a function on one process per device, for notebooks.

Through torch's elastic launch API (``elastic_launch`` / ``LaunchConfig``)."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from .._choice.selection import resolve
from .._contract import settings
from .._contract.errors import LaunchError
from .child import run_in_child
from .cores import warn_cpu_oversubscription
from .failures import LaunchFailedError, RankFailure
from .handoff import cores_per_process, patched_environ, selection_environment
from .options import check_processes
from .supervision import launcher_environment
from .torch_logs import quiet_torch_logs


def launch(
    function: Callable[..., Any],
    *args: Any,
    accelerator: Any = "auto",
    devices: Any = "auto",
    start_method: str | None = None,
) -> list[Any]:
    """Run ``function(*args)`` in one process per device, as ``accelctl launch`` runs a script.

    For notebooks: a ``Trainer()`` inside runs on what this call selected. One device: in this
    process; several: started on this machine by torch's elastic launch API.

    .. code-block:: python

        def train(epochs):
            trainer = accelctl.Trainer(max_epochs=epochs)
            trainer.fit(Net(), loader)
            return trainer.metrics

        metrics = accelctl.launch(train, 3, accelerator="cpu", devices=2)  # one per rank

    :param start_method: ``"fork"`` (the default where available: a notebook's function cannot
        be pickled for ``"spawn"``; one CPU thread each, since GNU OpenMP hangs in a forked
        child), ``"spawn"`` (a share of the cores each) or ``"forkserver"``.
    :returns: each process's return value, in rank order.
    :raises LaunchFailedError: when a process raised; the message holds its traceback.
    """
    import multiprocessing

    selection = resolve(accelerator, devices)
    nproc = len(selection.devices)
    child_env = selection_environment(selection)
    check_processes(selection, nproc)
    warn_cpu_oversubscription(selection)  # before any process starts: a warning, not a refusal
    if nproc == 1:
        with patched_environ(child_env):
            return [function(*args)]
    method = start_method or (
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    import torch

    cuda_initialized: Callable[[], bool] = torch.cuda.is_initialized
    if method == "fork" and cuda_initialized():
        raise LaunchError(
            "accelctl.launch cannot fork processes after CUDA was initialised in this process "
            "(a CUDA tensor or call earlier in the notebook): restart the kernel and call "
            "accelctl.launch before any CUDA work, or use start_method='spawn' with a function "
            "importable from a module"
        )
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # NVML-based device counting keeps a later fork usable (LaunchConfig counts CUDA devices).
    env = {**child_env, **launcher_environment(), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    if method != "fork" and not os.environ.get("OMP_NUM_THREADS"):
        # Fresh interpreters read it at start-up: an equal share of the cores each.
        env["OMP_NUM_THREADS"] = str(cores_per_process(nproc))
    # A forked child cannot use the OpenMP threads of its parent (GNU OpenMP hangs): one thread.
    threads = 1 if method == "fork" else 0
    with (
        patched_environ(env),
        quiet_torch_logs(True),
        tempfile.TemporaryDirectory(prefix="accelctl-launch-", ignore_cleanup_errors=True) as logs,
    ):
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nproc,
            run_id=str(uuid.uuid4()),
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            max_restarts=0,
            monitor_interval=0.1,
            start_method=method,
            # The ranks' error records, removed once read (torch's default folder stays).
            logs_specs=DefaultLogsSpecs(log_dir=logs),
        )
        try:
            results = elastic_launch(config, run_in_child)(threads, function, *args)
        except ChildFailedError as exc:
            failure = RankFailure.from_child_failed(exc, nproc)
            trace = f"\n\nrank {failure.rank}'s traceback:\n{failure.traceback}"
            if failure.error.startswith("MissingKernelError: ") and not settings.debug():
                trace = ""  # its one line says what and how to go on (ACCELCTL_DEBUG=1: more)
            raise LaunchFailedError(
                failure.describe() + (trace if failure.traceback else ""), failure=failure
            ) from None
    return [results[rank] for rank in sorted(results)]

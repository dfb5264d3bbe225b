"""What the sections that time loops in several processes share: launch, turns, hand loop.

Their launch under ``accelctl launch``, the turns their loops take, and the loop written by hand.

A section's script runs twice: once as the section (:func:`launch_workers` starts it again as
the worker of each process, ``SCRIPT --worker OUT --repeats N [--quick]``), and once per process,
where :func:`timed_in_turns` times its loops and rank 0 writes OUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any


def launch_workers(
    script: str, *, accelerator: str, devices: int, options: Iterable[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """Run ``script --worker OUT`` under ``accelctl launch``; return what rank 0 wrote to OUT.

    With ``options``, on ``devices`` of ``accelerator``.

    :raises RuntimeError: when the launch fails, with the end of its standard error.
    """
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as folder:
        out = Path(folder) / "measured.json"
        command = [
            sys.executable, "-m", "accelctl", "launch", "--accelerator", accelerator,
            "--devices", str(devices), script, "--worker", str(out), *options,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=dict(env), check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the benchmark's launch failed: {done.stderr.strip()[-2000:]}")
        measured: dict[str, Any] = json.loads(out.read_text())
        return measured


def worker_options(repeats: int, quick: bool) -> list[str]:
    """The options every worker takes: ``--repeats N``, and ``--quick`` for a quick run."""
    return ["--repeats", str(repeats)] + (["--quick"] if quick else [])


def joined_group(*, set_up_device: bool) -> tuple[Any, Any]:
    """Return the launcher's choice and this process's device, once the process group is joined.

    In a process ``accelctl launch`` started: the choice is ``accelctl.resolve()``, from
    ``ACCELCTL_ACCELERATOR`` and ``_DEVICES``; the device is set up first where ``set_up_device``.
    """
    import torch.distributed as dist

    import accelctl

    selection = accelctl.resolve()
    device = selection.devices[int(os.environ["LOCAL_RANK"])]
    if set_up_device:
        selection.accelerator.setup_device(device)
    dist.init_process_group(selection.distributed_backend)
    return selection, device


def group_result(selection: Any, steps: int, times: Mapping[str, list[float]]) -> dict[str, Any]:
    """Start every worker's result (rank 0's): accelerator, devices, backend, steps and loop times.

    The steps are those of one run; the backend is the collective one.
    """
    import torch.distributed as dist

    return {
        "accelerator": selection.accelerator.name,
        "devices": [str(d) for d in selection.devices],
        "backend": dist.get_backend(),
        "steps_per_run": steps,
        "times_s": {name: [round(t, 4) for t in values] for name, values in times.items()},
    }


#: A loop of a section: ``loop(dataset, epochs, device, root)``, trains a fresh model.
Loop = Callable[[Any, int, Any, str], Any]


def timed_in_turns(
    loops: Mapping[str, Loop], repeats: int, epochs: int, *, dataset: Any, device: Any, root: str
) -> tuple[dict[str, list[float]], list[Any]]:
    """Time the loops in turns, each from a barrier before it to one after it.

    Each loop is warmed up (one epoch: imports, first kernels, caches), then ``repeats`` rounds of
    all of them, ``epochs`` epochs each, taking turns (the order rotates by one each round, so drift
    in the machine hits all alike). Returns the times by loop, and what the loops returned that is
    not None, in order.

    Called in every process of the group, with the loops in the same order.
    """
    import torch.distributed as dist

    names = tuple(loops)
    times: dict[str, list[float]] = {name: [] for name in names}
    returned: list[Any] = []
    for name in names:
        loops[name](dataset, 1, device, root)
    for repeat in range(repeats):
        turn = repeat % len(names)
        for name in names[turn:] + names[:turn]:
            dist.barrier()
            started = time.perf_counter()
            value = loops[name](dataset, epochs, device, root)
            dist.barrier()
            times[name].append(time.perf_counter() - started)
            if value is not None:
                returned.append(value)
    return times, returned


def hand_loop(
    forward: Callable[[Any], Any],
    optimizer: Any,
    dataset: Any,
    epochs: int,
    *,
    batch: int,
    device: Any,
) -> None:
    """Train with the loop written by hand on torch.distributed.

    The data sharded by a ``DistributedSampler`` (reshuffled each epoch), then per batch zero_grad,
    ``forward``, the cross-entropy, backward and step; the last loss read (it waits for the device).
    """
    import torch.distributed as dist
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = DistributedSampler(dataset, dist.get_world_size(), dist.get_rank(), shuffle=True)
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
    loss = None
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward(x), y)
            loss.backward()
            optimizer.step()
    if loss is not None:
        float(loss.detach())

"""What a device's missing kernels cost, in two parts, each in a process of its own.

1. **The CPU fallback.** A training step of the small CNN and of the GPT-2 block the capability
   matrix's ``kernels`` row is derived from (``accelctl/_kernels/reference.py``; AdamW, foreach)
   on torch_openreg with ``ACCELCTL_CPU_FALLBACK=1`` (its convolution and attention run on the
   CPU, their inputs and results copied) against the same step on the CPU, in one process: the
   same seed, data and optimizer on both, one step on each in turn, the order alternating pair
   by pair. The figure is the median of the pairs' ratios, with their quartiles and a 95%
   interval of the median. torch_openreg's own kernels are the CPU's, run through its emulated
   device, so the ratio is that emulation and the fallback's copies together, not what a real
   device would gain or lose; an MLP whose kernels the device has, timed alike, is the
   emulation's own share.
2. **The error translation on a step that raises nothing.** The Trainer's step wraps its
   backward in a ``try`` whose ``except`` turns a missing kernel into accelctl's error; nothing
   else on the step's path is the translation's. In fits of the Trainer on the CPU, the steps
   take turns between the step as it is, a variant whose ``try`` is removed (the method's own
   source, the ``try`` node replaced by its body through ``ast``: no copy to drift) and the step
   as it is again, each timed. The own/own pairs measure the machine's noise; the translation
   is within it where the 95% intervals of the two medians overlap. The ``try`` statement itself
   is timed too, around a call that does nothing.

    python bench/kernels.py                     # both parts, 9 repeats
    python -m bench --sections kernels          # as a section of the benchmark suite
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Pairs of steps per repeat (a quick run's repeat has a few, to check that it runs).
PAIRS, QUICK_PAIRS = 25, 2
#: The models' sizes: wider than the kernels row's cases, small enough for a 2-core machine.
CNN_WIDTH, GPT_WIDTH, BATCH = 16, 64, 32


def ratio_summary(ratios: Sequence[float]) -> dict[str, Any]:
    """Summarize ratios taken pair by pair: median, quartiles and a 95% interval of the median.

    The quartiles are the pairs' spread; the interval is distribution-free: the order statistics n/2
    -+ 0.98 sqrt(n).
    """
    ordered = sorted(ratios)
    n = len(ordered)
    half = 0.98 * n**0.5
    low, high = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half + 0.5))
    quartiles = statistics.quantiles(ordered, n=4) if n > 1 else [ordered[0]] * 3
    return {
        "pairs": n,
        "median": round(statistics.median(ordered), 4),
        "p25": round(quartiles[0], 4),
        "p75": round(quartiles[2], 4),
        "ci95": [round(ordered[low], 4), round(ordered[high], 4)],
    }


# -- part 1: a step with the fallback, against the CPU --------------------------------------------


def _fallback_worker(repeats: int, quick: bool) -> dict[str, Any]:
    """Time pairs of one step on the CPU and one on the device, the order alternating pair by pair.

    In a process with torch's backend autoload on and ``ACCELCTL_CPU_FALLBACK=1``.
    """
    import torch

    import accelctl
    from accelctl._kernels.reference import (
        batch,
        optimizer,
        small_cnn,
        small_gpt,
        training_step,
    )
    from accelctl._kernels.setup import fallback_calls, set_up_kernels

    selection = accelctl.resolve("openreg", 1)
    handle, device = selection.accelerator, selection.devices[0]
    handle.setup_device(device)
    setup = set_up_kernels(handle, device)
    if setup.fallback != "accelctl":
        raise RuntimeError(f"the fallback is not accelctl's here: {setup}")
    pairs = repeats * (QUICK_PAIRS if quick else PAIRS)
    makers: dict[str, Callable[[], Any]] = {
        "cnn": lambda: small_cnn(width=CNN_WIDTH),
        "gpt": lambda: small_gpt(width=GPT_WIDTH),
        "mlp": _mlp,
    }
    described = {
        "cnn": f"ResNet-like CNN, width {CNN_WIDTH}, batch {BATCH} of 3x16x16",
        "gpt": f"GPT-2 block, width {GPT_WIDTH}, 4 heads, batch {BATCH} of 16 tokens",
        "mlp": "MLP 768-256-10 on the CNN's batch (nothing falls back: the device's own cost)",
    }
    models: dict[str, Any] = {}
    for name, make in makers.items():
        data = "gpt" if name == "gpt" else "cnn"
        inputs, targets = batch(data, BATCH, torch.Generator().manual_seed(0))
        steps: dict[str, Callable[[], float]] = {}
        for where in (torch.device("cpu"), device):
            torch.manual_seed(0)
            model = make().to(where)
            stepper = optimizer("adamw-foreach", model.parameters())
            x, y = inputs.to(where), targets.to(where)

            def step(model: Any = model, stepper: Any = stepper, x: Any = x, y: Any = y) -> float:
                started = time.perf_counter()
                float(training_step(model, x, y, stepper))  # the float waits for the device
                return time.perf_counter() - started

            steps[where.type] = step
        for step in steps.values():  # warm-up: first kernels, the optimizer's state
            for _ in range(3):
                step()
        before = fallback_calls(device.type) or 0
        steps[device.type]()
        calls = (fallback_calls(device.type) or 0) - before
        times: dict[str, list[float]] = {kind: [] for kind in steps}
        for index in range(pairs):
            order = list(steps) if index % 2 == 0 else list(reversed(steps))
            for kind in order:
                times[kind].append(steps[kind]())
        device_times, cpu_times = times[device.type], times["cpu"]
        models[name] = {
            "model": described[name],
            "cpu_ms_per_step": round(1000 * statistics.median(cpu_times), 3),
            "fallback_ms_per_step": round(1000 * statistics.median(device_times), 3),
            "ratio": ratio_summary([d / c for d, c in zip(device_times, cpu_times, strict=True)]),
            "fallback_calls_per_step": calls,
        }
    return {
        "device": str(device),
        "accelerator": handle.name,
        "fallen_back": _fallen_back(device.type),
        "models": models,
    }


def _mlp() -> Any:
    """The baseline: an MLP on the CNN's images, whose kernels torch_openreg has."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(768, 256), nn.ReLU(), nn.Linear(256, 10))


def _fallen_back(device_type: str) -> dict[str, int]:
    """Calls that ran on the CPU, by kernel (the warm-up's included)."""
    from accelctl._kernels import setup

    fallback = setup._FALLBACKS.get(device_type)
    return {} if fallback is None else dict(fallback.calls)


# -- part 2: the error translation on a step that raises nothing ---------------------------------


def untranslated_step() -> Callable[..., Any]:
    """Return ``Epochs._step`` without its ``try`` around the backward.

    The method's own source, the ``try`` whose body calls ``backward()`` replaced by that body.
    """
    from accelctl._training import epochs

    source = textwrap.dedent(inspect.getsource(epochs.Epochs._step))
    tree = ast.parse(source)
    removed = 0

    class Untry(ast.NodeTransformer):
        def visit_Try(self, node: ast.Try) -> Any:
            calls = [n for n in ast.walk(ast.Module(node.body, [])) if isinstance(n, ast.Call)]
            if any(getattr(c.func, "attr", None) == "backward" for c in calls):
                nonlocal removed
                removed += 1
                return node.body
            return self.generic_visit(node)

    tree = ast.fix_missing_locations(Untry().visit(tree))
    if removed != 1:
        raise RuntimeError(
            f"Epochs._step has {removed} try statements around a backward(), not 1: "
            "bench/kernels.py's variant no longer matches the Trainer's step"
        )
    namespace: dict[str, Any] = {}
    exec(compile(tree, "<Epochs._step without its try>", "exec"), vars(epochs), namespace)
    step: Callable[..., Any] = namespace["_step"]
    return step


#: The arms of part 2, in the order of a round (rotated by one each round).
ARMS = ("translated", "untranslated", "translated_again")


def _translation_worker(repeats: int, quick: bool) -> dict[str, Any]:
    """Time, in fits on the CPU, the Trainer's own step against the step without its try.

    In a process without any ACCELCTL_* variable: ``repeats`` fits whose steps take turns between
    the own step, the step without its try, and the own step again, each timed; the first round of
    each fit (whose first step counts the FLOPs) is left out.
    """
    import torch

    import accelctl
    from accelctl._training.epochs import Epochs

    sys.path.insert(0, str(ROOT))
    from bench.trainer_overhead import workload

    loader, epochs, fresh, described = workload(128, quick)
    real = Epochs._step
    arms = dict(zip(ARMS, (real, untranslated_step(), real), strict=True))
    times: dict[str, list[float]] = {name: [] for name in ARMS}
    taken: list[tuple[str, float]] = []

    def alternating(self: Any, *args: Any) -> int:
        turn, round_ = len(taken) % len(ARMS), len(taken) // len(ARMS)
        name = ARMS[(turn + round_) % len(ARMS)]
        started = time.perf_counter()
        step: int = arms[name](self, *args)
        taken.append((name, time.perf_counter() - started))
        return step

    Epochs._step = alternating
    try:
        with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as root:
            for fit_index in range(1 + repeats):  # the first fit warms up
                taken.clear()
                trainer = accelctl.Trainer(
                    accelerator="cpu",
                    devices=1,
                    max_epochs=epochs,
                    root_dir=root,
                    enable_progress_bar=False,
                    enable_checkpointing=False,
                )
                trainer.fit(fresh(), loader)
                rounds = len(taken) // len(ARMS) if fit_index else 0
                for index in range(1, rounds):  # the first round counted the FLOPs
                    for name, seconds in taken[index * len(ARMS) : (index + 1) * len(ARMS)]:
                        times[name].append(seconds)
    finally:
        Epochs._step = real
    own, without, again = (times[name] for name in ARMS)
    translation = ratio_summary([a / b for a, b in zip(own, without, strict=True)])
    noise = ratio_summary([a / b for a, b in zip(own, again, strict=True)])
    low, high = translation["ci95"]
    within = low <= noise["ci95"][1] and noise["ci95"][0] <= high
    return {
        "device": "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": described,
        "fits": repeats,
        "steps_per_fit": epochs * len(loader),
        "ms_per_step": {name: round(1000 * statistics.median(times[name]), 4) for name in ARMS},
        "ratio_translated_untranslated": translation,
        "ratio_translated_translated": noise,
        "within_noise": within,
        "try_statement_ns": _try_statement_ns(),
    }


def _try_statement_ns(number: int = 1_000_000) -> dict[str, float]:
    """Time a call of a do-nothing function, bare and in the Trainer's ``try``/``except``.

    Nanoseconds per call, the fastest of 5 rounds each.
    """

    def nothing() -> None:
        return None

    def bare() -> None:
        nothing()

    def guarded() -> None:
        try:
            nothing()
        except RuntimeError:
            raise

    return {
        name: round(min(timeit.repeat(function, number=number, repeat=5)) / number * 1e9, 2)
        for name, function in (("bare", bare), ("try_except", guarded))
    }


# -- the section ----------------------------------------------------------------------------------


def _worker_env(fallback: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    if fallback:
        env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)  # openreg loads with torch
        env["ACCELCTL_CPU_FALLBACK"] = "1"
    else:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _in_child(part: str, repeats: int, quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="accelctl-bench-") as folder:
        out = Path(folder) / "part.json"
        command = [sys.executable, str(Path(__file__)), "--worker", part, "--out", str(out),
                   "--repeats", str(repeats)] + (["--quick"] if quick else [])  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, env=_worker_env(part == "fallback"),
            timeout=3600, check=False,
        )  # fmt: skip  # the timeout is a hang guard only
        if done.returncode != 0:
            raise RuntimeError(f"the {part} part failed: {done.stderr.strip()[-2000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def _openreg_here() -> str | None:
    """Why torch_openreg cannot be used here; None where it can."""
    import importlib.util

    if importlib.util.find_spec("torch_openreg") is None:
        return "torch_openreg is not installed (the test sessions install it from ../shared)"
    return None


def run(repeats: int = 9, quick: bool = False) -> dict[str, Any]:
    """Both parts, each in a process of its own; plain data for a report."""
    why_not = _openreg_here()
    section: dict[str, Any] = {"repeats": repeats, "quick": quick}
    if why_not is None:
        section["fallback"] = _in_child("fallback", repeats, quick)
    else:
        section["fallback"] = {"skipped": why_not}
    section["translation"] = _in_child("translation", repeats, quick)
    return section


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", choices=("fallback", "translation"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        work = _fallback_worker if args.worker == "fallback" else _translation_worker
        args.out.write_text(json.dumps(work(args.repeats, args.quick)))
        return
    print(json.dumps(run(args.repeats, args.quick), indent=2))


if __name__ == "__main__":
    main()

"""The process group's backend through the HF bridges on openreg devices.

For ``tests/hf/test_openreg_backend_choice.py``: ``python backend_choice_run.py OUT`` under
``accelctl launch --accelerator openreg --devices 2`` (torch_openreg 0.0.3, whose backend is
``occl``).

Each process makes, in this order: an Accelerate ``Accelerator`` with
``InitProcessGroupKwargs(backend="gloo")`` and transformers ``TrainingArguments`` with
``ddp_backend="gloo"`` (gloo carries no openreg tensors: each must be refused before any state
is made), then an ``Accelerator`` with ``InitProcessGroupKwargs(backend="nccl")``, Accelerate's
default (a warning, and the plugin's ``occl``), and a ``reduce`` over the group it joined. Every
process writes ``OUT/rank<r>.json``.
"""

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from accelerate.utils import InitProcessGroupKwargs

import accelctl
from accelctl.integrations.accelerate import Accelerator
from accelctl.integrations.transformers import TrainingArguments

OUT = Path(sys.argv[1])
RANK = int(os.environ["RANK"])


def refused(make):
    """The message of the ``ProcessSetupError`` that ``make()`` raised; None when it made it."""
    try:
        make()
    except accelctl.ProcessSetupError as exc:
        return str(exc)
    return None


report = {
    "accelerate_gloo": refused(
        lambda: Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")])
    ),
    "transformers_gloo": refused(
        lambda: TrainingArguments(str(OUT / "args"), report_to=[], ddp_backend="gloo")
    ),
}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="nccl")])
report["nccl_warnings"] = [
    str(w.message) for w in caught if "InitProcessGroupKwargs" in str(w.message)
]
report["device"] = str(accelerator.device)
report["state_backend"] = accelerator.state.backend
report["group_backend"] = str(torch.distributed.get_backend())
total = accelerator.reduce(torch.tensor([RANK + 1.0], device=accelerator.device), reduction="sum")
report["sum"] = total.item()
OUT.mkdir(parents=True, exist_ok=True)
(OUT / f"rank{RANK}.json").write_text(json.dumps(report))

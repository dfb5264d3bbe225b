"""Functions that ``accelctl.launch`` runs in the tests, and a runner for a fresh interpreter.

The fork-based launches run in a fresh interpreter (``python launch_functions.py CASE ROOT``): a
process forked from the long-lived pytest process inherits whatever earlier tests left behind
(Lightning's threads, gloo state), which can hang a forked child for reasons unrelated to the code
under test. A notebook kernel that starts with accelctl.launch is in the fresh state.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trainer_models import Classifier, loaders

import accelctl


def where_am_i(tag: str) -> dict[str, Any]:
    trainer = accelctl.Trainer()
    return {
        "tag": tag,
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "accelerator": trainer.accelerator.name,
        "devices": os.environ.get("ACCELCTL_DEVICES"),
        "pid": os.getpid(),
    }


def train_and_report(root: str) -> dict[str, float]:
    trainer = accelctl.Trainer(max_epochs=2, root_dir=root)
    trainer.fit(Classifier(), *loaders())
    return trainer.metrics


def fail_on_rank_one() -> None:
    if int(os.environ["RANK"]) == 1:
        raise KeyError("rank one refuses")


def main(case: str, root: str) -> None:
    report: dict[str, Any] = {"parent_pid": os.getpid()}
    if case == "ranks":
        report["where"] = accelctl.launch(where_am_i, "x", accelerator="cpu", devices=2)
        report["devices_left_in_parent"] = os.environ.get("ACCELCTL_DEVICES")
        report["metrics"] = accelctl.launch(train_and_report, root, accelerator="cpu", devices=2)
    elif case == "fail":
        try:
            accelctl.launch(fail_on_rank_one, accelerator="cpu", devices=2)
        except accelctl.LaunchFailedError as error:
            report.update(message=str(error), rank=error.failure.rank, exit_code=error.exit_code)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

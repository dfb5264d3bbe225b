"""A training script for the run-folder tests: ``python runs_script.py ROOT EPOCHS [CKPT_PATH]``.

Trains a classifier for EPOCHS epochs (8 optimizer steps an epoch in one process, 4 in each of
two) into ROOT, resuming from CKPT_PATH when given. With ``ACCELCTL_TEST_HOLD=DIR`` in its
environment, rank 0 writes ``DIR/ready`` at step 9 (the first epoch's checkpoint is written; the
fit holds its run folder) and waits there until ``DIR/release`` exists (a hang guard of 240 s).
With ``ACCELCTL_TEST_FSDP=1`` it trains with ``strategy="fsdp"`` and writes a checkpoint at
every step. Each rank writes ``ROOT/final-<pid>.json``: its run folder, world size and steps.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import accelctl

sys.path.insert(0, str(Path(__file__).parent))
from trainer_models import Classifier, separable

root, epochs = Path(sys.argv[1]), int(sys.argv[2])
ckpt_path = sys.argv[3] if len(sys.argv) > 3 else None
hold = os.environ.get("ACCELCTL_TEST_HOLD")


class Holding(Classifier):
    def training_step(self, batch, batch_idx):
        if hold and trainer.global_step + 1 == 9 and trainer.is_global_zero:
            Path(hold, "ready").touch()
            deadline = time.monotonic() + 240  # hang guard: the test releases it in seconds
            while not Path(hold, "release").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        return super().training_step(batch, batch_idx)


torch.manual_seed(0)
sharded = os.environ.get("ACCELCTL_TEST_FSDP") == "1"
trainer = accelctl.Trainer(
    max_epochs=epochs,
    root_dir=root,
    log_every_n_steps=4,
    strategy="fsdp" if sharded else "auto",
    checkpoint_every_n_steps=1 if sharded else None,
)
trainer.fit(Holding(), DataLoader(separable(256), batch_size=32, shuffle=True), ckpt_path=ckpt_path)
result = {"run_dir": str(trainer.run_dir), "world_size": trainer.world_size,
          "global_step": trainer.global_step}  # fmt: skip
(root / f"final-{os.getpid()}.json").write_text(json.dumps(result))

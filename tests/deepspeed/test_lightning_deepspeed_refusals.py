"""Lightning's ``DeepSpeedStrategy`` through the bridge refuses what cannot run when made.

In this process: a set-up that cannot run is refused when the Trainer is made, before any process
starts, and Lightning's own accelerators keep Lightning's own DeepSpeed path (the bridge's wrap acts
for accelctl's accelerators only). The runs themselves: test_openreg_deepspeed_frameworks.py.
"""

from __future__ import annotations

import pytest
from fakeaccelerators import MetaAccelerator

import accelctl

pytest.importorskip("deepspeed")

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}


def test_deepspeed_on_a_plugin_without_a_backend_is_refused_when_the_trainer_is_made() -> None:
    import lightning  # the session installs it (noxfile.py): imported here, not in every worker

    from accelctl.integrations.lightning import LightningAccelerator

    with pytest.raises(accelctl.ProcessSetupError) as caught:
        lightning.Trainer(
            accelerator=LightningAccelerator(MetaAccelerator()), devices=1,
            strategy="deepspeed_stage_2", **QUIET,
        )  # fmt: skip
    message = str(caught.value)
    assert "'metaacc' runs in a single process only" in message
    # One device: DeepSpeed starts torch.distributed even for one process.
    assert "chose DeepSpeedStrategy, which starts torch.distributed for 1 process(es)" in message


def test_lightnings_own_cpu_accelerator_keeps_lightnings_deepspeed_refusal() -> None:
    import lightning

    trainer = lightning.Trainer(accelerator="cpu", devices=1, strategy="deepspeed_stage_2", **QUIET)
    with pytest.raises(RuntimeError, match="only supported on CUDA GPUs but `CPUAccelerator`"):
        trainer.strategy.setup_environment()

"""An Accelerator passed as an object, its backend wrong for its devices, and its devices launched.

An ``accelctl.Accelerator`` with no entry point, whose ``distributed_backend`` torch does not have
for its devices, and the devices a launched script's own instance takes.

- ``accelctl.launch(function, accelerator=instance, devices=2)`` holds the instance: it refuses
  before it starts a process, with advice that works for an object (no `accelctl validate
  <name>`, which finds only installed plugins).
- ``accelctl launch --devices 2 script.py`` cannot see an instance made in the script: the
  processes start, and each refuses when its Trainer is made, saying so (not "none was started").
- In a launched child whose launcher selected another accelerator (``ACCELCTL_ACCELERATOR``),
  ``devices="auto"`` on the script's own instance is one device per process of the launch, not
  the other accelerator's indices from ``ACCELCTL_DEVICES``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed
import torch.distributed.launcher.api

import accelctl
from accelctl._choice import distributed_backend as _distributed_backend

#: torchrun's variables for rank 0 of 2 on this machine (nothing rendezvous: refused before).
TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # fmt: skip


class MyCPU(accelctl.Accelerator):
    """CPU processes, with whatever backend the test gives."""

    name = "mycpu"
    device_type = "cpu"

    def __init__(self, backend: str | None = "gloo") -> None:
        self.distributed_backend = backend

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1

    def parse_devices(self, devices: Any) -> int:
        return accelctl.parse_process_count(devices, accelerator=self.name)

    def get_parallel_devices(self, devices: int) -> list[torch.device]:
        return [torch.device("cpu")] * devices

    def device_stats(self, device: torch.device) -> dict[str, int | float]:
        return {}


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """torch's elastic launch and ``init_process_group`` record their call and raise instead."""
    record: list[str] = []

    def recorder(what: str) -> Any:
        def record_call(*args: Any, **kwargs: Any) -> Any:
            record.append(what)
            raise AssertionError(f"{what} was reached")

        return record_call

    monkeypatch.setattr(torch.distributed.launcher.api, "elastic_launch", recorder("elastic"))
    monkeypatch.setattr(torch.distributed, "init_process_group", recorder("init_process_group"))
    monkeypatch.setattr(_distributed_backend, "_verdicts", {})
    return record


def _assert_advice_for_an_object(message: str, backend: str) -> None:
    named = "accelerator 'mycpu' (plugin 'mycpu', class MyCPU, given as an object) declares"
    assert f"{named} distributed_backend={backend!r}" in message
    assert "torch's backend for 'cpu' devices here is 'gloo'" in message
    assert "Set distributed_backend = 'gloo' in class MyCPU" in message
    assert "accelctl.testing.assert_conforms(" in message
    assert "accelctl validate mycpu" not in message  # it finds no installed 'mycpu'


@pytest.mark.parametrize("backend", ["nccl", "glooo"])
def test_the_launch_function_refuses_an_instance_before_starting_a_process(
    nothing_starts: list[str], backend: str
) -> None:
    with pytest.raises(accelctl.LaunchError) as caught:
        accelctl.launch(print, accelerator=MyCPU(backend), devices=2)
    message = str(caught.value)
    _assert_advice_for_an_object(message, backend)
    assert "so none was started" in message
    assert nothing_starts == []


@pytest.mark.parametrize("backend", ["nccl", "glooo"])
def test_a_launched_trainer_on_an_instance_says_its_processes_were_started(
    nothing_starts: list[str], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # What each process of `accelctl launch --devices 2 script.py` sees: the launcher, which
    # cannot see the instance made in the script, handed it only its own choice.
    for key, value in {**TWO_RANKS, "ACCELCTL_ACCELERATOR": "cpu", "ACCELCTL_DEVICES": "2"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        accelctl.Trainer(accelerator=MyCPU(backend))
    message = str(caught.value)
    _assert_advice_for_an_object(message, backend)
    assert "torchrun started 2 processes for this run, and each refuses here" in message
    assert "none was started" not in message
    assert nothing_starts == []


def test_a_trainer_alone_on_an_instance_refuses_before_suggesting_a_launch(
    nothing_starts: list[str],
) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        accelctl.Trainer(accelerator=MyCPU("nccl"), devices=2)
    message = str(caught.value)
    _assert_advice_for_an_object(message, "nccl")
    assert "so none was started" in message and "accelctl launch" not in message


@pytest.mark.parametrize(
    ("launchers_choice", "handed", "processes"),
    [("privateuse1", "0,1", 2), ("cpu", "4", 3)],  # openreg's indices; a count that is not ours
)
def test_a_launched_instance_takes_one_device_per_process_not_the_launchers_devices(
    launchers_choice: str, handed: str, processes: int
) -> None:
    # `accelctl launch --devices N script.py` where "auto" chose another accelerator (openreg's
    # indices "0,1"): the script's own instance is not what the launcher selected.
    environ = {"ACCELCTL_ACCELERATOR": launchers_choice, "ACCELCTL_DEVICES": handed,
               "LOCAL_WORLD_SIZE": str(processes)}  # fmt: skip
    selection = accelctl.resolve(MyCPU(), "auto", environ=environ)
    assert selection.devices == [torch.device("cpu")] * processes


def test_an_instance_handed_only_devices_takes_them() -> None:
    # accelctl.launch(fn, accelerator=instance, devices=2): the launcher held the instance and
    # hands only ACCELCTL_DEVICES; that spec is the instance's.
    environ = {"ACCELCTL_DEVICES": "2", "LOCAL_WORLD_SIZE": "2"}
    assert len(accelctl.resolve(MyCPU(), "auto", environ=environ).devices) == 2


def test_a_name_the_launcher_selected_takes_its_devices() -> None:
    # By its name or an alias the user knows: the launcher's spec is that accelerator's.
    environ = {"ACCELCTL_ACCELERATOR": "cpu", "ACCELCTL_DEVICES": "3", "LOCAL_WORLD_SIZE": "2"}
    assert len(accelctl.resolve("cpu", "auto", environ=environ).devices) == 3
    assert len(accelctl.resolve("auto", "auto", environ=environ).devices) == 3


@pytest.mark.slow
def test_accelctl_launch_of_a_script_with_a_bad_instance_says_each_process_refused(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            import accelctl
            from test_instance_backend import MyCPU

            accelctl.Trainer(accelerator=MyCPU("glooo"))
            print("made")
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "accelctl", "launch", "--devices", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: two interpreters importing torch
        env={**_environ_without_accelctl(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert done.returncode != 0 and "made" not in done.stdout
    assert "torchrun started 2 processes for this run, and each refuses here" in done.stderr
    assert "none was started" not in done.stderr
    assert "Set distributed_backend = 'gloo' in class MyCPU" in done.stderr
    assert "accelctl validate mycpu" not in done.stderr


def _environ_without_accelctl() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}

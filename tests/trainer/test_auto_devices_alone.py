"""``devices="auto"`` in a process alone with two devices runs on the first, and says so once.

``python train.py``, no launcher: the Trainer runs on the first device and says once how to use
both; an explicit ``devices=2`` alone stays an error. Messages name the accelerator as the user
knows it (an out-of-tree backend's own name, not the plugin's ``privateuse1``).

The plugin here (``fakeplugins.slots``) is such a backend's shape: canonical name ``slot``, its
devices' type (and the alias it answers to) ``twin``; its devices are CPU devices, so nothing
needs hardware.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest
import torch

import accelctl
from accelctl._training import processes

LAUNCH_LINE = "accelctl launch --accelerator twin --devices 2 train.py --epochs 3"


@pytest.fixture
def two_devices(fake_site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site.install("accelctl-slot", {"slot": "fakeplugins.slots:SlotAccelerator"})
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "3"])
    monkeypatch.setattr(processes, "_told_alone", set())  # "once per process": this test's


def test_auto_alone_trains_on_the_first_device_and_says_once_how_to_use_all(
    two_devices: None,
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = accelctl.Trainer(root_dir="unused")  # the user's line
        again = accelctl.Trainer(root_dir="unused")
    # One name per device (issue 46): the accelerator's is its devices' (the user's), the
    # plugin's own stays at hand.
    assert trainer.accelerator.name == again.accelerator.name == "twin"
    assert trainer.accelerator.plugin_name == "slot"
    assert trainer.devices == [trainer.device] == [torch.device("cpu")]
    assert (trainer.global_rank, trainer.world_size) == (0, 1)
    [warning] = [w for w in caught if "started alone" in str(w.message)]  # once, not twice
    assert LAUNCH_LINE in str(warning.message)
    assert "'slot'" not in str(warning.message)  # the name the user knows
    assert warning.filename == __file__  # the user's line, not accelctl's


def test_resolve_still_selects_every_device_for_a_launcher(two_devices: None) -> None:
    selection = accelctl.resolve()
    assert len(selection.devices) == 2  # accelctl launch starts one process per device


def test_an_explicit_count_alone_is_refused_with_the_launch_line(two_devices: None) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        accelctl.Trainer(accelerator="twin", devices=2)
    message = str(caught.value)
    assert message.startswith("devices=2 on 'twin' needs one process per device")
    assert message.endswith(LAUNCH_LINE)


def test_indices_alone_are_refused_as_given_not_as_a_count(two_devices: None) -> None:
    # Issue 46: devices="0,1" was echoed back as devices=2 (and --devices 2 in the line).
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        accelctl.Trainer(accelerator="twin", devices="0,1")
    message = str(caught.value)
    assert message.startswith("devices='0,1' on 'twin' needs one process per device")
    assert message.endswith("accelctl launch --accelerator twin --devices 0,1 train.py --epochs 3")


def test_accelctl_devices_set_by_hand_alone_is_explicit(
    two_devices: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_DEVICES", "0,1")
    with pytest.raises(accelctl.ProcessSetupError, match="needs one process per device") as caught:
        accelctl.Trainer()
    assert str(caught.value).startswith("ACCELCTL_DEVICES='0,1' on 'twin'")  # its source


def test_under_a_launcher_auto_takes_one_device_per_process(
    two_devices: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    for key, value in launched.items():
        monkeypatch.setenv(key, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "started alone" warning under a launcher
        trainer = accelctl.Trainer(root_dir="unused")
    assert len(trainer.devices) == 2 and trainer.global_rank == 1


def test_messages_name_the_devices_own_name_where_the_plugin_answers_to_it(
    two_devices: None,
) -> None:
    selection = accelctl.resolve("slot", devices=2)
    assert selection.shown_name == "twin"
    assert accelctl.resolve("twin", devices=2).shown_name == "twin"
    assert accelctl.resolve("cpu", devices=2).shown_name == "cpu"

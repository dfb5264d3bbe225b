"""A plugin's devices are called by their type everywhere a user reads them, if it answers to it.

A plugin whose devices' type is not its own name, and that answers to that type as an alias (the
generic PrivateUse1 plugin serving ``openreg``), is called by that name; its own name stays at hand
as ``plugin_name``.

``fakeplugins.slots:SlotAccelerator`` has that shape without hardware: installed as ``slot``, its
devices of type ``twin``, which it answers to.
"""

from __future__ import annotations

import pytest

import accelctl
from accelctl import AcceleratorUnavailableError, UnknownAcceleratorError
from accelctl._base.wording import on_command_line, setting
from accelctl._choice.selection import Selection
from accelctl.testing import Registry

from fakedists import FakeSite

SLOT = {"slot": "fakeplugins.slots:SlotAccelerator"}


@pytest.fixture
def slot_site(fake_site: FakeSite) -> FakeSite:
    fake_site.install("accelctl-slot", SLOT, version="1.2")
    return fake_site


def registry(site: FakeSite) -> Registry:
    return Registry(path=site.path, environ={})


def test_a_loaded_plugin_is_called_by_the_device_type_it_answers_to(slot_site: FakeSite) -> None:
    for asked in ("slot", "twin", "TWIN"):  # its own name, the alias, any case
        handle = registry(slot_site).get(asked)
        assert (handle.name, handle.plugin_name) == ("twin", "slot")
        assert handle.describe() == "accelerator 'twin' (plugin 'slot', accelctl-slot 1.2)"


def test_before_loading_only_the_plugins_own_name_is_known(slot_site: FakeSite) -> None:
    [row] = registry(slot_site).listing(detect=False)  # no plugin code runs
    assert (row.name, row.plugin_name, row.accelerator.state) == ("slot", "slot", "not-loaded")


def test_a_plugin_whose_name_is_its_device_type_keeps_it(fake_site: FakeSite) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.good:Fast"})  # alias "zoom", no type
    handle = registry(fake_site).get("zoom")
    assert (handle.name, handle.plugin_name) == ("good", "good")
    assert handle.describe() == "accelerator 'good' (acme-good 1.0)"


def test_resolve_and_the_trainer_name_it_as_the_user_does(slot_site: FakeSite) -> None:
    selection = accelctl.resolve("slot", devices=2)
    document = selection.to_dict()
    assert (document["accelerator"], document["plugin"]) == ("twin", "slot")
    assert selection.shown_name == "twin"
    trainer = accelctl.Trainer(accelerator="twin", devices=1, root_dir="unused")
    assert (trainer.accelerator.name, trainer.accelerator.plugin_name) == ("twin", "slot")


def test_the_listing_names_the_accelerator_and_keeps_the_plugin(slot_site: FakeSite) -> None:
    [row] = registry(slot_site).listing()
    document = row.to_dict()
    assert (document["name"], document["plugin"], document["aliases"]) == ("twin", "slot", ["twin"])


def test_an_unknown_name_lists_what_can_be_typed_and_suggests_from_that_list(
    fake_site: FakeSite,
) -> None:
    fake_site.install("accelctl-slot", SLOT)
    fake_site.install("acme-good", {"good": "fakeplugins.good:Fast"})  # also called "zoom"
    reg = registry(fake_site)
    with pytest.raises(UnknownAcceleratorError) as caught:
        reg.get("twim")
    message = str(caught.value)
    # The installed list names each accelerator once, as the user types it, with its aliases;
    # the suggestion is one of those names (it was 'twin', missing from "installed: good, slot").
    assert "(installed: good (or zoom), twin)." in message
    assert message.endswith("Did you mean 'twin'?")
    assert caught.value.installed == ("good", "twin")
    with pytest.raises(UnknownAcceleratorError) as caught:
        reg.get("slott")  # a typo of the plugin's own name: said to be the plugin's
    assert str(caught.value).endswith("Did you mean 'slot' (the plugin of 'twin')?")


def test_python_callers_read_keywords(fake_site: FakeSite) -> None:
    fake_site.install("acme-absent", {"absent": "fakeplugins.undetected:UndetectedAccelerator"})
    with pytest.raises(AcceleratorUnavailableError) as caught:
        accelctl.resolve("absent")
    assert 'Use accelerator="auto" to take what is available' in str(caught.value)
    with pytest.raises(accelctl.DeviceSpecError) as bad:
        accelctl.resolve("cpu", devices="0,1")
    assert str(bad.value).startswith("cpu: devices='0,1' lists device indices")


@pytest.mark.parametrize(
    ("name", "value", "python", "command_line"),
    [
        ("accelerator", "auto", 'accelerator="auto"', "--accelerator auto"),
        ("devices", "0, 1", 'devices="0, 1"', "--devices '0, 1'"),  # as a shell takes it
        ("devices", [0, 1], "devices=[0, 1]", "devices=[0, 1]"),  # no command line holds a list
    ],
)
def test_a_setting_is_written_for_its_reader(
    name: str, value: object, python: str, command_line: str
) -> None:
    assert setting(name, value) == python
    with on_command_line():
        assert setting(name, value) == command_line
    assert setting(name, value) == python  # the CLI's wording ends with its command


def test_devices_are_echoed_as_given(slot_site: FakeSite) -> None:
    import torch

    handle = registry(slot_site).get("twin")
    devices = [torch.device("cpu", 0), torch.device("cpu", 1)]

    def selection(spec: object, variable: str | None = None) -> Selection:
        return Selection(handle, devices, [0, 1], spec=spec, spec_variable=variable)

    # devices="0,1" is "0,1" (it was the count 2 in messages and in --devices), with the devices.
    assert selection("0,1").asked_devices == "devices='0,1' (cpu:0, cpu:1)"
    assert selection(" 0,1 ").given_devices == "0,1"
    assert selection(2).given_devices == "2"
    assert selection("auto").given_devices == "2"  # what "auto" selected, as a user types it
    assert selection([0, 1]).given_devices == "2"  # no command line holds a list
    from_environ = selection("0,1", "ACCELCTL_DEVICES")
    assert from_environ.asked_devices == "ACCELCTL_DEVICES='0,1' (cpu:0, cpu:1)"
    with on_command_line():
        assert selection("0,1").asked_devices == "--devices 0,1 (cpu:0, cpu:1)"

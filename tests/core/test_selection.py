"""Selection (contract section 6): auto, gpu, names, aliases, case, instances, env, errors."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest
import torch

import accelctl
from accelctl import (
    AcceleratorUnavailableError,
    DeviceSpecError,
    PluginHookError,
    PluginLoadError,
    PluginWarning,
    UnknownAcceleratorError,
    resolve,
)
from accelctl.testing import Registry

from fakedists import FakeSite


@pytest.fixture
def site(fake_site: FakeSite) -> FakeSite:
    """cpu-like floor (priority 0), an available "fast" (priority 150), an absent gpu (100)."""
    fake_site.install("floor", {"floor": "fakeplugins.good:Floor"})
    fake_site.install("fast", {"fast": "fakeplugins.good:Fast"})
    fake_site.install("absent-gpu", {"absentgpu": "fakeplugins.undetected:UndetectedAccelerator"})
    return fake_site


def reg(site: FakeSite, **environ: str) -> Registry:
    return Registry(path=site.path, environ=environ)


def test_auto_takes_highest_available_priority(site: FakeSite) -> None:
    selection = resolve("auto", registry=reg(site), environ={})
    assert selection.accelerator.name == "fast"
    assert selection.devices == [torch.device("cpu"), torch.device("cpu")]
    assert selection.parsed == [0, 1]
    assert selection.to_dict()["devices"] == ["cpu", "cpu"]
    assert selection.distributed_backend == "gloo" and selection.world_size == 2


def test_auto_honours_accelctl_accelerator(site: FakeSite) -> None:
    environ = {"ACCELCTL_ACCELERATOR": "Floor"}
    assert resolve("auto", registry=reg(site), environ=environ).accelerator.name == "floor"
    # An explicit name is not overridden by the variable.
    assert resolve("fast", registry=reg(site), environ=environ).accelerator.name == "fast"


def test_auto_env_override_can_be_unavailable(site: FakeSite) -> None:
    with pytest.raises(AcceleratorUnavailableError, match="no absentgpu hardware here"):
        resolve("auto", registry=reg(site), environ={"ACCELCTL_ACCELERATOR": "absentgpu"})


def test_devices_auto_honours_accelctl_devices(site: FakeSite) -> None:
    selection = resolve("fast", "auto", registry=reg(site), environ={"ACCELCTL_DEVICES": "1,"})
    assert selection.parsed == [1]
    # An explicit spec wins over the variable.
    assert resolve("fast", 1, registry=reg(site), environ={"ACCELCTL_DEVICES": "2"}).parsed == [0]


def test_gpu_chooses_family_and_explains_when_none_available(site: FakeSite) -> None:
    with pytest.raises(AcceleratorUnavailableError) as info:
        resolve("gpu", registry=reg(site), environ={})
    message = str(info.value)
    assert "absentgpu: no absentgpu hardware here" in message
    assert 'Use accelerator="cpu"' in message
    site.install("good-gpu", {"goodgpu": "fakeplugins.good:GoodGpu"})
    assert resolve("GPU", registry=reg(site), environ={}).accelerator.name == "goodgpu"


def test_gpu_with_no_gpu_plugin_installed(fake_site: FakeSite) -> None:
    fake_site.install("floor", {"floor": "fakeplugins.good:Floor"})
    with pytest.raises(AcceleratorUnavailableError, match="pip install accelctl-cuda"):
        resolve("gpu", registry=reg(fake_site), environ={})


def test_name_alias_and_case(site: FakeSite) -> None:
    assert resolve(" FAST ", registry=reg(site), environ={}).accelerator.name == "fast"
    assert resolve("Zoom", registry=reg(site), environ={}).accelerator.name == "fast"


def test_unknown_and_unavailable_names(site: FakeSite) -> None:
    with pytest.raises(UnknownAcceleratorError, match="Did you mean 'fast'"):
        resolve("fats", registry=reg(site), environ={})
    with pytest.raises(AcceleratorUnavailableError) as info:
        resolve("absentgpu", registry=reg(site), environ={})
    assert "installed but not available here: no absentgpu hardware here" in str(info.value)
    assert info.value.reason == "no absentgpu hardware here"


def test_bad_devices_spec_reaches_the_caller(site: FakeSite) -> None:
    with pytest.raises(DeviceSpecError, match=r"fast: devices=3 asks for 3 devices"):
        resolve("fast", 3, registry=reg(site), environ={})


def test_conflict_surfaces_from_resolve(site: FakeSite) -> None:
    site.install("other-fast", {"fast": "fakeplugins.good:GoodAccelerator"})
    with pytest.raises(PluginLoadError, match=r"fast and other-fast|other-fast and fast"):
        resolve("fast", registry=reg(site), environ={})


def test_auto_skips_broken_plugins_with_a_warning(site: FakeSite) -> None:
    site.install("shiny", {"shiny": "fakeplugins.hostile:FirstDetectFailsWithOSError"})
    site.install(
        "noimport", {"noimport": "sel_noimport"}, {"sel_noimport": "import does_not_exist"}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        selection = resolve("auto", registry=reg(site), environ={})
    assert selection.accelerator.name == "fast"
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert any("'shiny'" in m and "OSError: driver gone" in m for m in messages), messages
    assert any("'noimport'" in m and "ModuleNotFoundError" in m for m in messages), messages


def test_auto_with_nothing_available(fake_site: FakeSite) -> None:
    fake_site.install("absent", {"absent": "fakeplugins.undetected:UndetectedAccelerator"})
    with pytest.raises(
        AcceleratorUnavailableError, match=r"absent \(no absent hardware here\).*accelctl-cpu"
    ):
        resolve("auto", registry=reg(fake_site), environ={})


class TinyAccelerator(accelctl.Accelerator):
    name = "tiny"
    device_type = "cpu"
    distributed_backend = "gloo"

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2


def test_instance_is_used_as_it_is(fake_site: FakeSite) -> None:
    instance = TinyAccelerator()
    selection = resolve(instance, 2, registry=reg(fake_site), environ={"ACCELCTL_ACCELERATOR": "x"})
    assert selection.accelerator.plugin is instance
    assert selection.accelerator.name == "tiny" and selection.accelerator.distribution is None
    assert selection.devices == [torch.device("cpu", 0), torch.device("cpu", 1)]
    with pytest.raises(DeviceSpecError, match="tiny: devices=5"):
        resolve(instance, 5, registry=reg(fake_site), environ={})


def test_handle_is_used_as_it_is(site: FakeSite) -> None:
    handle = reg(site).get("floor")
    assert resolve(handle, registry=reg(site), environ={}).accelerator is handle


def test_instance_name_defaults_to_class_name() -> None:
    class WidgetAccelerator(TinyAccelerator):
        name = ""

    assert accelctl.AcceleratorHandle.from_object(WidgetAccelerator()).name == "widget"


def test_default_registry_sees_the_installed_cpu_plugin() -> None:
    selection = accelctl.resolve("cpu", "2")
    assert selection.accelerator.distribution == "accelctl-cpu"
    assert selection.devices == [torch.device("cpu")] * 2
    assert "accelctl_cpu" in sys.modules


def test_gpu_skips_a_broken_info_loudly_and_names_it(site: FakeSite) -> None:
    site.install("weird", {"weird": "fakeplugins.hostile:BackendIsNumber"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(AcceleratorUnavailableError) as info:
            resolve("gpu", registry=reg(site), environ={})
        assert resolve("auto", registry=reg(site), environ={}).accelerator.name == "fast"
    assert "weird: broken: accelerator 'weird'" in str(info.value)
    skipped = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert len([m for m in skipped if "'weird'" in m]) >= 2  # under "gpu" and under "auto"


@pytest.mark.parametrize(
    ("value", "error"),
    [("absentgpu", AcceleratorUnavailableError), ("bogus", UnknownAcceleratorError)],
)
def test_env_override_errors_name_the_variable(site: FakeSite, value: str, error: type) -> None:
    with pytest.raises(error) as info:
        resolve("auto", registry=reg(site), environ={"ACCELCTL_ACCELERATOR": value})
    message = str(info.value)
    assert message.startswith(f'ACCELCTL_ACCELERATOR={value!r} sets what accelerator="auto"')
    assert message.endswith("Unset ACCELCTL_ACCELERATOR to choose automatically.")


def test_auto_with_every_plugin_disabled_names_the_variables(site: FakeSite) -> None:
    registry = Registry(path=site.path, environ={"ACCELCTL_PLUGINS": "absentgpu"})
    with pytest.raises(AcceleratorUnavailableError) as info:
        resolve("auto", registry=registry, environ={})
    message = str(info.value)
    assert "disabled by ACCELCTL_PLUGINS/ACCELCTL_DISABLE: fast, floor" in message
    assert "pip install" not in message


# -- devices="auto" on an accelerator that runs in one process (no distributed backend) ---------


def _solo_registry(fake_site: Any) -> accelctl.Registry:
    fake_site.install(
        "accelctl-solo", {"solo": "fakeplugins.single_process:SingleProcessAccelerator"}
    )
    return accelctl.testing.Registry(path=fake_site.path)


def test_auto_devices_on_a_single_process_accelerator_is_one_device(fake_site: Any) -> None:
    registry = _solo_registry(fake_site)
    selection = accelctl.resolve("auto", "auto", registry=registry, environ={})
    assert selection.accelerator.name == "solo"
    assert [str(d) for d in selection.devices] == ["cpu:0"]
    assert selection.accelerator.auto_device_count() == 2  # still two visible


@pytest.mark.parametrize(
    ("spec", "expected"), [("1,", ["cpu:1"]), ([1], ["cpu:1"]), (-1, ["cpu:0", "cpu:1"])]
)
def test_explicit_specs_still_reach_every_visible_device(
    fake_site: Any, spec: Any, expected: list[str]
) -> None:
    registry = _solo_registry(fake_site)
    selection = accelctl.resolve("solo", spec, registry=registry, environ={})
    assert [str(d) for d in selection.devices] == expected


def test_accelctl_devices_is_taken_as_given_on_a_single_process_accelerator(
    fake_site: Any,
) -> None:
    registry = _solo_registry(fake_site)
    selection = accelctl.resolve(
        "solo", "auto", registry=registry, environ={"ACCELCTL_DEVICES": "1,"}
    )
    assert [str(d) for d in selection.devices] == ["cpu:1"]


def test_auto_devices_with_a_distributed_backend_is_every_visible_device(fake_site: Any) -> None:
    fake_site.install("accelctl-duo", {"duo": "fakeplugins.good:GoodAccelerator"})
    registry = accelctl.testing.Registry(path=fake_site.path)
    assert len(accelctl.resolve("duo", "auto", registry=registry, environ={}).devices) == 2


# -- cached errors are raised anew; a class-based plugin's name; wrong argument types -----------


def test_a_cached_load_error_is_never_edited_by_a_caller(fake_site: FakeSite) -> None:
    fake_site.install("accelctl-brk", {"brk": "fakeplugins.refuses_import"})
    registry = Registry(path=fake_site.path)
    environ = {"ACCELCTL_ACCELERATOR": "brk"}
    seen = []
    for _ in range(3):
        with pytest.raises(PluginLoadError) as info:
            resolve("auto", registry=registry, environ=environ)
        seen.append(info.value)
        assert str(info.value).count("ACCELCTL_ACCELERATOR='brk' sets what") == 1
    with pytest.raises(PluginLoadError) as plain:
        registry.get("brk")
    assert "ACCELCTL_ACCELERATOR" not in str(plain.value)
    assert str(plain.value).startswith("accelerator 'brk' (accelctl-brk")
    # A fresh error each time, chained to the one the registry keeps.
    assert len({id(error) for error in [*seen, plain.value]}) == 4
    assert isinstance(plain.value.__cause__, PluginLoadError)


def test_a_class_plugin_is_named_by_its_entry_point_in_its_default_hooks(
    fake_site: FakeSite,
) -> None:
    fake_site.install(
        "accelctl-gaudi",
        {
            "hpu2": "fakeplugins.classy:DeclaredGaudiAccelerator",
            "hpu3": "fakeplugins.classy:GaudiAccelerator",
        },
    )
    registry = Registry(path=fake_site.path)
    with pytest.raises(DeviceSpecError) as info:
        resolve("hpu2", devices=5, registry=registry, environ={})
    assert str(info.value).startswith("hpu2: devices=5 asks for 5 devices")
    assert info.value.accelerator == "hpu2"
    selection = resolve("hpu2", devices="1,", registry=registry, environ={})
    assert selection.devices == [torch.device("cpu", 1)]  # the declared device type
    # Nothing declared: no torch.device("gaudi") guessed from the class name, an error instead.
    with pytest.raises(PluginHookError, match="declares neither device_type nor name"):
        resolve("hpu3", devices=1, registry=registry, environ={})


@pytest.mark.parametrize(
    ("accelerator", "hint"),
    [
        (torch.device("cuda", 0), "pass its type: accelerator='cuda', devices=[0]"),
        (None, ""),
        (1.5, ""),
        (["cpu"], ""),
        (object(), ""),
    ],
)
def test_a_wrong_accelerator_type_is_the_callers_error(accelerator: object, hint: str) -> None:
    with pytest.raises(TypeError) as info:
        resolve(accelerator, registry=Registry(path=[]), environ={})
    message = str(info.value)
    assert isinstance(info.value, accelctl.AccelctlError)  # one line in the CLI
    assert not isinstance(info.value, PluginLoadError)
    assert f"({type(accelerator).__name__}) is not an accelerator; accepted: " in message
    assert hint in message
    assert "hookimpl" in message  # the accepted forms are listed

"""Plugins and packages that try to break accelctl, each installed as a real dist-info folder.

Malformed metadata, BaseExceptions, hostile text, plugins that steer the selection. The plugins are
modules of tests/fixtures/fakeplugins (``hostile`` and those named after what their import does).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings

import pytest

import accelctl
from accelctl import PluginHookError, PluginLoadError, PluginWarning
from accelctl.testing import Registry

from fakedists import FakeSite


def _rows(site: FakeSite, detect: bool = True) -> dict[str, accelctl.AcceleratorStatus]:
    return {row.name: row for row in Registry(path=site.path).listing(detect=detect)}


# -- 1. malformed distributions --------------------------------------------------------------


def test_malformed_entry_points_of_an_unrelated_distribution_are_skipped(fake_site: FakeSite):
    fake_site.install_raw("unrelated", {"entry_points.txt": "[console_scripts]\nno-equals-sign\n"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    for detect in (True, False):
        with pytest.warns(PluginWarning) as record:
            rows = _rows(fake_site, detect)
        assert list(rows) == ["good"]
    assert rows["good"].state == "not-run"
    # Not a plugin, but named: `import torch` (its backend autoload) fails on it too.
    assert str(record[0].message) == (
        "skipping a broken distribution: cannot read the entry points of distribution unrelated "
        f"({fake_site.root}/unrelated-1.0.dist-info/entry_points.txt): line 2 ('no-equals-sign') "
        "is not 'name = value'; reinstall it (pip install --force-reinstall unrelated)"
    )
    with pytest.warns(PluginWarning, match="skipping a broken distribution"):
        assert Registry(path=fake_site.path).get("good").detect() is True


def test_malformed_entry_points_declaring_our_group_are_a_broken_row(fake_site: FakeSite):
    text = "[accelctl.accelerators]\nfoo = fakeplugins.marked\noops\n"
    fake_site.install_raw("acme-foo", {"entry_points.txt": text})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    for detect in (True, False):
        rows = _rows(fake_site, detect)
        assert rows["foo"].state == "broken" and rows["good"].state != "broken"
        error = rows["foo"].error or ""
        assert "acme_foo-1.0.dist-info/entry_points.txt" in error
        assert "line 3 ('oops') is not 'name = value'" in error
        assert "pip install --force-reinstall acme_foo" in error
    with pytest.raises(PluginLoadError, match="cannot read the entry points of distribution"):
        Registry(path=fake_site.path).get("foo")
    assert "fakeplugins.marked" not in sys.modules


def test_a_broken_section_without_a_readable_line_is_named_after_its_distribution(
    fake_site: FakeSite,
):
    fake_site.install_raw("acme-bar", {"entry_points.txt": "[accelctl.accelerators]\nbar\n"})
    rows = _rows(fake_site, detect=False)
    assert list(rows) == ["acme_bar"] and rows["acme_bar"].state == "broken"


def test_metadata_that_is_not_utf8_is_a_broken_row(fake_site: FakeSite):
    metadata = b"Metadata-Version: 2.1\nName: acme-latin\nVersion: 1.0\nSummary: caf\xe9\n"
    fake_site.install_raw(
        "acme-latin",
        {
            "METADATA": metadata,
            "entry_points.txt": "[accelctl.accelerators]\nlatin = fakeplugins.marked\n",
        },
    )
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    for detect in (False, True):
        rows = _rows(fake_site, detect)
        latin = rows["latin"]
        assert latin.state == "broken" and latin.distribution == "acme_latin"
        assert "acme_latin-1.0.dist-info/METADATA" in (latin.error or "")
        assert "UnicodeDecodeError" in (latin.error or "")
    assert rows["good"].state == "available"
    assert "fakeplugins.marked" not in sys.modules


def test_entry_points_that_are_not_utf8_are_a_broken_row(fake_site: FakeSite):
    text = b"[accelctl.accelerators]\nwild = hostile_wild\n# caf\xe9\n"
    fake_site.install_raw("acme-wild", {"entry_points.txt": text})
    fake_site.install_raw("other", {"entry_points.txt": b"[console_scripts]\nx = y\n# \xff\n"})
    with pytest.warns(PluginWarning, match="distribution other .*UnicodeDecodeError"):
        rows = _rows(fake_site, detect=False)
    assert list(rows) == ["wild"]
    assert "UnicodeDecodeError" in (rows["wild"].error or "")


# -- 3. BaseException from plugins -------------------------------------------------------------


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        ("DetectRaisesBaseException", "hook detect() raised Vanish: gone"),
        ("DetectRaisesGeneratorExit", "hook detect() raised GeneratorExit: closing"),
        (
            "DetectRaisesKeyboardInterrupt",
            "hook detect() raised KeyboardInterrupt: not the user (raised by the plugin's own "
            "code, not by Ctrl-C)",
        ),
        ("DetectRaisesUnprintable", "hook detect() raised Mute: <str() failed: RuntimeError>"),
    ],
    ids=["base-exception", "generator-exit", "keyboard-interrupt", "str-raises"],
)
def test_anything_detect_raises_is_the_plugins_failure(
    fake_site: FakeSite, plugin: str, expected: str
):
    fake_site.install("acme-odd", {"odd": f"fakeplugins.hostile:{plugin}"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    rows = _rows(fake_site)  # asked in worker threads, where no Ctrl-C can arrive
    assert rows["odd"].state == "broken"
    assert rows["odd"].error == f"accelerator 'odd' (acme-odd 1.0): {expected}"
    assert rows["good"].state == "available"
    handle = Registry(path=fake_site.path).get("odd")
    if "KeyboardInterrupt" in expected:
        # In the caller's (main) thread it cannot be told from a Ctrl-C: it stops the program.
        with pytest.raises(KeyboardInterrupt):
            handle.detect()
        return
    with pytest.raises(PluginHookError) as caught:
        handle.detect()
    assert caught.value.__cause__ is not None  # what the plugin raised, for --debug


def test_a_base_exception_at_import_is_the_plugins_failure(fake_site: FakeSite):
    fake_site.install("acme-odd", {"odd": "fakeplugins.vanishes"})
    with pytest.raises(PluginLoadError) as caught:
        Registry(path=fake_site.path).get("odd")
    assert "importing 'fakeplugins.vanishes' failed: Vanish: gone at import" in str(caught.value)
    assert type(caught.value.__cause__).__name__ == "Vanish"


def test_a_class_whose_instantiation_raises_a_base_exception_is_broken(fake_site: FakeSite):
    source = """
        class Odd:
            def __init__(self):
                raise GeneratorExit("no instance")
    """
    fake_site.install("acme-odd", {"odd": "hostile_odd:Odd"}, {"hostile_odd": source})
    with pytest.raises(PluginLoadError, match=r"could not be instantiated .* GeneratorExit"):
        Registry(path=fake_site.path).get("odd")


def test_a_property_that_raises_while_pluggy_registers_is_broken(fake_site: FakeSite):
    # Registering reads the plugin's attributes (a required hook left unmarked is looked up to
    # say so): a property's code runs then.
    source = """
        class Odd:
            @property
            def detect(self):
                raise SystemExit("read me not")
    """
    fake_site.install("acme-odd", {"odd": "hostile_odd:Odd"}, {"hostile_odd": source})
    with pytest.raises(PluginLoadError) as caught:
        Registry(path=fake_site.path).get("odd")
    assert str(caught.value) == (
        "accelerator 'odd' (acme-odd 1.0): registering it failed: SystemExit: read me not"
    )


def test_a_real_ctrl_c_during_plugin_code_still_stops(fake_site: FakeSite):
    fake_site.install("acme-slow", {"slow": "fakeplugins.hostile:DetectSendsCtrlC"})
    handle = Registry(path=fake_site.path).get("slow")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        handle.detect()
    # accelctl never replaced the program's handler, around the call or otherwise.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_keyboard_interrupt_in_another_thread_is_the_plugins(fake_site: FakeSite):
    # Python delivers signals to the main thread only: elsewhere it can only be the plugin's.
    fake_site.install("acme-odd", {"odd": "fakeplugins.hostile:DetectRaisesKeyboardInterrupt"})
    handle = Registry(path=fake_site.path).get("odd")
    caught: list[BaseException] = []

    def run() -> None:
        try:
            handle.detect()
        except BaseException as exc:
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert isinstance(caught[0], PluginHookError)
    assert "KeyboardInterrupt: not the user (raised by the plugin's own code, not by Ctrl-C)" in (
        str(caught[0])
    )


def test_with_a_handler_of_the_programs_own_a_keyboard_interrupt_passes(fake_site: FakeSite):
    fake_site.install("acme-odd", {"odd": "fakeplugins.hostile:DetectRaisesKeyboardInterrupt"})
    handle = Registry(path=fake_site.path).get("odd")

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            handle.detect()  # in the main thread: maybe a real Ctrl-C, so it stops
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


# -- 5. text from plugins ----------------------------------------------------------------------


def test_a_huge_error_with_escape_sequences_is_bounded_and_escaped(fake_site: FakeSite):
    fake_site.install("acme-loud", {"loud": "fakeplugins.hostile:DetectRaisesHugeEscapedError"})
    error = _rows(fake_site)["loud"].error or ""
    assert len(error) < 5000 and "\x1b" not in error and "\x07" not in error
    assert "RuntimeError: \\x1b]0;pwned\\x07xxx" in error
    assert "characters cut" in error
    with pytest.raises(PluginHookError) as caught:
        Registry(path=fake_site.path).get("loud").detect()
    assert len(str(caught.value)) < 5000
    assert len(str(caught.value.__cause__)) > 2_000_000  # the original is kept whole


def test_a_hostile_repr_in_a_returned_value_is_reported(fake_site: FakeSite):
    fake_site.install("acme-odd", {"odd": "fakeplugins.hostile:DetectReturnsUnprintable"})
    error = _rows(fake_site)["odd"].error or ""
    assert "hook detect() returned <Odd object, repr() failed" in error


def test_a_long_user_name_is_bounded_and_the_pip_hint_only_for_package_names(
    fake_site: FakeSite,
):
    registry = Registry(path=fake_site.path)
    with pytest.raises(accelctl.UnknownAcceleratorError) as caught:
        registry.get("z" * 100_000)
    assert len(str(caught.value)) < 1000
    for name in ("gpu:0", "", "../x", "x; rm -rf ~"):
        with pytest.raises(accelctl.UnknownAcceleratorError) as caught:
            registry.get(name)
        assert "pip install" not in str(caught.value), name
        assert "lowercase letters, digits, '_' and '-'" in str(caught.value)
    with pytest.raises(accelctl.UnknownAcceleratorError, match="convention named accelctl-zorro"):
        registry.get("zorro")


# -- 6. plugins that steer the selection -------------------------------------------------------


def test_a_plugin_that_sets_accelctl_devices_at_import_does_not_steer_resolve(
    fake_site: FakeSite,
):
    fake_site.install("acme-aaa", {"aaa": "fakeplugins.steers_devices:SteeringAccelerator"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    with pytest.warns(PluginWarning) as record:
        selection = accelctl.resolve(registry=Registry(path=fake_site.path))
    assert selection.accelerator.name == "good" and len(selection.devices) == 2
    assert "ACCELCTL_DEVICES" not in os.environ  # put back as the user left it
    [message] = [str(w.message) for w in record if "ACCELCTL_DEVICES" in str(w.message)]
    assert message.startswith("accelerator 'aaa' (acme-aaa 1.0): importing it set ACCELCTL_DEVICES")
    assert "accelctl restored it" in message


def test_resolve_reads_its_settings_before_any_plugin_code(fake_site: FakeSite, monkeypatch):
    # detect() is plugin code too: what it sets during this call cannot change this call.
    fake_site.install("acme-good", {"good": "fakeplugins.hostile:DetectSetsDevices"})
    monkeypatch.setenv("ACCELCTL_DEVICES", "auto")
    selection = accelctl.resolve("good", registry=Registry(path=fake_site.path))
    assert len(selection.devices) == 2


def test_a_plugin_that_clears_sys_path_is_named_and_the_others_still_load(fake_site: FakeSite):
    fake_site.install("acme-aaa", {"aaa": "fakeplugins.clears_sys_path:PathClearingAccelerator"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    path = list(sys.path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        rows = _rows(fake_site)
    assert sys.path == path
    assert rows["good"].state == "available"
    messages = [str(w.message) for w in record if issubclass(w.category, PluginWarning)]
    assert messages == [
        "accelerator 'aaa' (acme-aaa 1.0): importing it changed sys.path (removed "
        f"{len(path)} of its entries); accelctl put the entries back; report this to the "
        "plugin's authors"
    ]


def test_a_plugin_that_adds_to_sys_path_is_named_and_the_entry_kept(fake_site: FakeSite):
    fake_site.install("acme-aaa", {"aaa": "fakeplugins.extends_sys_path:PathExtendingAccelerator"})
    try:
        with pytest.warns(PluginWarning, match=r"added 1 entry to sys.path \('/opt/vendor/lib'\)"):
            Registry(path=fake_site.path).get("aaa")
        assert sys.path[-1] == "/opt/vendor/lib"
    finally:
        sys.path.remove("/opt/vendor/lib")

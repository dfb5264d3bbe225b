"""Deadlines on plugin hooks (ACCELCTL_HOOK_TIMEOUT) and the concurrent asking of plugins.

A hook that never returns waits on the fake site's ``gate`` module, which the ``gate`` fixture
opens when the test ends, so no thread outlives its test. Tests that wait for a deadline to pass
set it to 1 s: the hooks of the plugins that must be unaffected are instant Python, so 1 s is a
generous margin even on a loaded machine; they are marked slow.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest

from accelctl import _deadline
from accelctl._errors import AccelctlError, PluginHookError, PluginWarning
from accelctl._registry import Registry
from accelctl._selection import resolve

from fakedists import GATE_MODULE, FakeSite, good_plugin, waiting_plugin

#: Hang guard of the barrier tests: a barrier that is never complete breaks after this.
BARRIER_GUARD_S = 30

#: The deadline these tests set. A working plugin in the same run must answer within it even on a
#: loaded 2-core machine, so it is generous; the hung plugin never answers, so only the tests'
#: length grows with it (each waits for it once).
DEADLINE_S = 5


@pytest.fixture
def gate(fake_site: FakeSite) -> Iterator[FakeSite]:
    """The fake site with the ``gate`` module; the gate opens when the test ends."""
    (fake_site.root / "gate.py").write_text(GATE_MODULE.replace("\n    ", "\n"))
    fake_site.modules.append("gate")
    yield fake_site
    module = sys.modules.get("gate")
    if module is not None:
        module.OPEN.set()


# -- ACCELCTL_HOOK_TIMEOUT ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("", 10.0), ("  ", 10.0), ("2.5", 2.5), (" 30 ", 30.0), ("none", None), ("0", None)],
)
def test_hook_timeout_values(value: str, seconds: float | None) -> None:
    assert _deadline.hook_timeout({"ACCELCTL_HOOK_TIMEOUT": value}) == seconds


def test_hook_timeout_default_when_unset() -> None:
    assert _deadline.hook_timeout({}) == _deadline.DEFAULT_HOOK_TIMEOUT_S == 10.0


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "1e309", "1e12", "10s"])
def test_hook_timeout_refuses_what_is_no_deadline(value: str) -> None:
    with pytest.raises(AccelctlError, match=r"ACCELCTL_HOOK_TIMEOUT=.*'none' to wait forever"):
        _deadline.hook_timeout({"ACCELCTL_HOOK_TIMEOUT": value})


def test_bad_timeout_is_one_error_for_list(gate: FakeSite, monkeypatch) -> None:
    gate.install("acme-good", {"good": "dl_good"}, {"dl_good": good_plugin("good")})
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "soon")
    with pytest.raises(AccelctlError, match="ACCELCTL_HOOK_TIMEOUT='soon'"):
        Registry(path=gate.path).records()


def test_bad_timeout_is_the_users_error_for_a_named_plugin(gate: FakeSite, monkeypatch) -> None:
    gate.install("acme-good", {"good": "dl_good"}, {"dl_good": good_plugin("good")})
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "soon")
    with pytest.raises(AccelctlError) as caught:
        resolve("good", registry=Registry(path=gate.path), environ={})
    assert not isinstance(caught.value, PluginHookError)
    assert str(caught.value).startswith("ACCELCTL_HOOK_TIMEOUT='soon' is not a deadline")


# -- the mechanism --------------------------------------------------------------------------


def _timeout_error(seconds: float) -> BaseException:
    return RuntimeError(f"no answer within {seconds:g} s")


def test_guard_returns_and_raises_as_a_plain_call() -> None:
    assert _deadline.guard(lambda: 42, on_timeout=_timeout_error) == 42
    with pytest.raises(KeyError, match="mine"):
        _deadline.guard(lambda: {}["mine"], on_timeout=_timeout_error)
    with pytest.raises(SystemExit):
        _deadline.guard(lambda: sys.exit(3), on_timeout=_timeout_error)


def test_guard_runs_the_call_in_another_thread_with_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller's")
    ident, value = _deadline.guard(
        lambda: (threading.get_ident(), var.get()), on_timeout=_timeout_error
    )
    assert ident != threading.get_ident() and value == "caller's"


def test_guard_without_deadline_runs_inline(monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "none")
    ident = _deadline.guard(threading.get_ident, on_timeout=_timeout_error)
    assert ident == threading.get_ident()


@pytest.mark.slow
def test_guard_gives_up_past_the_deadline_and_leaves_the_call_running(monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "0.2")
    release = threading.Event()
    try:
        with pytest.raises(RuntimeError, match=r"no answer within 0\.2 s"):
            _deadline.guard(release.wait, on_timeout=_timeout_error)
        stuck = _deadline.abandoned_threads()
        assert stuck and all(thread.daemon for thread in stuck)
    finally:
        release.set()
    for thread in stuck:
        thread.join(timeout=30)  # hang guard; it returns at once now
    assert not _deadline.abandoned_threads()


def test_run_all_runs_the_functions_at_once() -> None:
    # Each function waits until all three wait: only concurrent runs get past the barrier.
    barrier = threading.Barrier(3, timeout=BARRIER_GUARD_S)
    outcomes = _deadline.run_all([lambda i=i: (barrier.wait(), i)[1] for i in range(3)])
    assert [outcome.unwrap() for outcome in outcomes] == [0, 1, 2]


def test_run_all_hands_back_each_exception() -> None:
    outcomes = _deadline.run_all([lambda: 1, lambda: 1 / 0])
    assert outcomes[0].unwrap() == 1
    assert isinstance(outcomes[1].error, ZeroDivisionError)


@pytest.mark.slow
def test_run_all_replaces_a_stuck_worker(monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    monkeypatch.setattr(_deadline, "MAX_WORKERS", 1)
    release = threading.Event()
    try:
        outcomes = _deadline.run_all(
            [
                lambda: _deadline.guard(release.wait, on_timeout=_timeout_error),
                lambda: _deadline.guard(lambda: "second", on_timeout=_timeout_error),
            ]
        )
    finally:
        release.set()
    assert isinstance(outcomes[0].error, RuntimeError)
    assert outcomes[1].unwrap() == "second"


# -- on plugins -----------------------------------------------------------------------------


def test_list_detects_plugins_concurrently(gate: FakeSite) -> None:
    # Each detect() waits for the other two: a one-after-the-other listing breaks the barrier
    # (after BARRIER_GUARD_S) and shows three broken rows.
    (gate.root / "gate.py").write_text(
        f"import threading\nOPEN = threading.Event()\n"
        f"ALL = threading.Barrier(3, timeout={BARRIER_GUARD_S})\n"
    )
    for name in ("one", "two", "three"):
        source = waiting_plugin(name, "detect", wait="gate.ALL.wait()")
        gate.install(f"acme-{name}", {name: f"dl_{name}"}, {f"dl_{name}": source})
    rows = {row.name: row for row in Registry(path=gate.path).records()}
    assert {name: row.state for name, row in rows.items()} == dict.fromkeys(
        ("one", "three", "two"), "available"
    )


def test_auto_detects_candidates_concurrently(gate: FakeSite) -> None:
    (gate.root / "gate.py").write_text(
        f"import threading\nOPEN = threading.Event()\n"
        f"ALL = threading.Barrier(2, timeout={BARRIER_GUARD_S})\n"
    )
    gate.install(
        "acme-a", {"a": "dl_a"}, {"dl_a": waiting_plugin("a", "detect", "gate.ALL.wait()")}
    )
    source = waiting_plugin("b", "detect", "gate.ALL.wait()", priority=20)
    gate.install("acme-b", {"b": "dl_b"}, {"dl_b": source})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)  # a broken barrier would be skipped, loudly
        selection = resolve("auto", registry=Registry(path=gate.path), environ={})
    assert selection.accelerator.name == "b"


def test_selection_hooks_run_in_workers_and_setup_device_in_the_caller(gate: FakeSite) -> None:
    source = good_plugin("good").replace(
        "def detect():\n        return True",
        "def detect():\n        import threading\n        SEEN.append(threading.get_ident())\n"
        "        return True\n\n    @accelctl.hookimpl\n    def setup_device(device):\n"
        "        import threading\n        SEEN.append(threading.get_ident())",
    )
    gate.install("acme-good", {"good": "dl_seen"}, {"dl_seen": "    SEEN = []\n" + source})
    handle = Registry(path=gate.path).get("good")
    handle.detect()
    handle.setup_device(handle.get_parallel_devices(handle.parse_devices(1))[0])
    detect_thread, setup_thread = sys.modules["dl_seen"].SEEN
    # setup_device sets the *calling thread's* current device (torch.cuda.set_device): it must
    # run there; the selection hooks run in a worker the caller can stop waiting for.
    assert setup_thread == threading.get_ident() != detect_thread


@pytest.mark.slow
def test_list_reports_a_hook_that_does_not_answer(gate: FakeSite, monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    gate.install("acme-hung", {"hung": "dl_hung"}, {"dl_hung": waiting_plugin("hung", "detect")})
    gate.install("acme-good", {"good": "dl_good"}, {"dl_good": good_plugin("good")})
    registry = Registry(path=gate.path)
    rows = {row.name: row for row in registry.records()}
    assert rows["good"].state == "available" and rows["good"].device_count == 2
    hung = rows["hung"]
    assert hung.state == "broken" and hung.available is None
    assert (
        f"accelerator 'hung' (acme-hung 1.0): detect() did not answer within {DEADLINE_S} s"
        in hung.error
    )
    assert "ACCELCTL_HOOK_TIMEOUT" in hung.error
    # Its thread is still busy: a later call fails at once instead of stacking up another one.
    with pytest.raises(PluginHookError, match=r"did not answer.*auto_device_count\(\) was not"):
        registry.get("hung").auto_device_count()


@pytest.mark.slow
def test_a_hung_accelerator_info_does_not_stall_the_others(gate: FakeSite, monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    source = waiting_plugin("hung", "accelerator_info")
    gate.install("acme-hung", {"hung": "dl_hung"}, {"dl_hung": source})
    gate.install("acme-good", {"good": "dl_good"}, {"dl_good": good_plugin("good")})
    rows = {row.name: row for row in Registry(path=gate.path).records()}
    assert rows["good"].state == "available" and rows["good"].priority == 10
    assert f"accelerator_info() did not answer within {DEADLINE_S} s" in (rows["hung"].error or "")


@pytest.mark.slow
def test_auto_skips_a_plugin_that_does_not_answer(gate: FakeSite, monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    source = waiting_plugin("hung", "detect", priority=500)
    gate.install("acme-hung", {"hung": "dl_hung"}, {"dl_hung": source})
    gate.install("acme-good", {"good": "dl_good"}, {"dl_good": good_plugin("good")})
    with pytest.warns(PluginWarning, match=r"skipping .*'hung'.*detect\(\) did not answer"):
        selection = resolve("auto", registry=Registry(path=gate.path), environ={})
    assert selection.accelerator.name == "good"


@pytest.mark.slow
def test_a_named_plugin_that_does_not_answer_is_an_error(gate: FakeSite, monkeypatch) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    source = waiting_plugin("hung", "parse_devices")
    gate.install("acme-hung", {"hung": "dl_hung"}, {"dl_hung": source})
    with pytest.raises(
        PluginHookError, match=rf"parse_devices\(\) did not answer within {DEADLINE_S} s"
    ):
        resolve("hung", 1, registry=Registry(path=gate.path), environ={})

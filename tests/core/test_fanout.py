"""Where accelctl asks many plugins at once, and where it calls one directly.

``list``, ``"auto"``, ``"gpu"`` and aliases ask every plugin at once, each plugin's whole probe
under one deadline (``ACCELCTL_HOOK_TIMEOUT``) in a fixed pool of daemon threads; a named lookup
and every hook called through a handle run inline, in the caller's thread, with no thread set up.

A hook that never returns waits on ``fakeplugins.gate`` (tests/fixtures), which the ``gate``
fixture opens when the test ends, so no thread outlives its test. The tests that wait for a
deadline to pass share one wait each (several hung plugins at once); the plugins that must be
unaffected are instant Python, far within the deadline even on a loaded machine.
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import accelctl
from accelctl import PluginHookError, PluginWarning, resolve
from accelctl._base.problem import Problem
from accelctl._host import fanout as _fanout
from accelctl.testing import Registry

from fakedists import FakeSite

#: Hang guard of the barrier tests: a barrier that is never complete breaks after this.
BARRIER_GUARD_S = 30
#: The deadline of the tests that wait for one to pass (see the module's docstring).
DEADLINE_S = 3


@pytest.fixture
def gate(fake_site: FakeSite) -> Iterator[ModuleType]:
    """``fakeplugins.gate``, this test's own, opened when the test ends.

    The fake site has just forgotten the fake plugins' modules.
    """
    module = importlib.import_module("fakeplugins.gate")
    yield module
    module.OPEN.set()


def _barrier(gate: ModuleType, monkeypatch: pytest.MonkeyPatch, parties: int) -> None:
    """Each waiting hook waits until ``parties`` of them wait."""
    barrier = threading.Barrier(parties, timeout=BARRIER_GUARD_S)
    monkeypatch.setattr(gate, "wait", barrier.wait)


# -- many at once ---------------------------------------------------------------------------


def test_list_probes_plugins_concurrently(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each detect() waits for the other two: one after the other, the barrier breaks (after
    # BARRIER_GUARD_S) and the three rows are broken.
    _barrier(gate, monkeypatch, 3)
    for name in ("one", "two", "three"):
        fake_site.install(f"acme-{name}", {name: "fakeplugins.waiting:WaitsInDetect"})
    rows = {row.name: row for row in Registry(path=fake_site.path).listing()}
    assert {name: row.state for name, row in rows.items()} == dict.fromkeys(
        ("one", "three", "two"), "available"
    )


def test_auto_probes_its_candidates_concurrently(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    _barrier(gate, monkeypatch, 2)
    fake_site.install("acme-a", {"a": "fakeplugins.waiting:WaitsInDetect"})
    fake_site.install("acme-b", {"b": "fakeplugins.waiting:WaitsInDetectPreferred"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)  # a broken barrier would be skipped, loudly
        selection = resolve("auto", registry=Registry(path=fake_site.path), environ={})
    assert selection.accelerator.name == "b"


@pytest.mark.slow
def test_plugins_that_do_not_answer_are_their_rows_and_the_others_are_unaffected(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = set(threading.enumerate())  # an earlier test's threads are not this one's
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    fake_site.install("acme-hungdete", {"hungdete": "fakeplugins.waiting:WaitsInDetect"})
    fake_site.install("acme-hungacce", {"hungacce": "fakeplugins.waiting:WaitsInAcceleratorInfo"})
    # An import that never ends: the plugins imported after it are still imported.
    fake_site.install(
        "acme-hungimport", {"hungimport": "fakeplugins.hangs_at_import:LateAccelerator"}
    )
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    registry = Registry(path=fake_site.path)
    rows = {row.name: row for row in registry.listing()}
    assert rows["good"].state == "available" and rows["good"].device_count == 2
    late = f"did not answer within {DEADLINE_S} s"
    for name, doing in (
        ("hungdete", "detect()"),
        ("hungacce", "accelerator_info()"),
        ("hungimport", "its import"),
    ):
        row = rows[name]
        assert row.state == "broken" and row.available is None, name
        assert f"accelerator '{name}' (acme-{name} 1.0): {doing} {late}" in (row.error or "")
        assert "ACCELCTL_HOOK_TIMEOUT" in (row.error or "")
    # Asked again while still stuck: answered at once, with no second thread started for it.
    before = set(threading.enumerate())
    again = {row.name: row for row in registry.listing()}
    assert f"detect() {late}" in (again["hungdete"].error or "")
    assert again["good"].state == "available"
    assert [t for t in set(threading.enumerate()) - before if t.name == "accelctl-plugin"] == []
    # Once it answers, it is asked again like any other: late once is not broken forever.
    gate.OPEN.set()
    for thread in set(threading.enumerate()) - earlier:
        if thread.name == "accelctl-plugin":
            thread.join(BARRIER_GUARD_S)
    recovered = {row.name: row for row in registry.listing()}
    assert recovered["hungdete"].state == "available"
    assert recovered["hungacce"].state == "available"


@pytest.mark.slow
def test_auto_skips_a_plugin_that_does_not_answer(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    fake_site.install("acme-hung", {"hung": "fakeplugins.waiting:WaitsInDetectForemost"})
    fake_site.install("acme-good", {"good": "fakeplugins.good:GoodAccelerator"})
    with pytest.warns(PluginWarning, match=r"skipping .*'hung'.*detect\(\) did not answer"):
        selection = resolve("auto", registry=Registry(path=fake_site.path), environ={})
    assert selection.accelerator.name == "good"


@pytest.mark.slow
@pytest.mark.parametrize("asked", ["auto", "stuckalias", "stuckdev"])
def test_a_named_commands_late_plugin_is_named_however_it_was_chosen(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch, asked: str
) -> None:
    # `accelctl resolve` chooses the plugin first (by "auto", its alias "stuckalias" or its
    # name), then resolves its devices under a deadline of that plugin's: the plugin it picked
    # is the one named when it stops answering, and no handle or registry knows of deadlines.
    from accelctl.cli._selecting import resolve_in_time

    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", str(DEADLINE_S))
    monkeypatch.setenv("ACCELCTL_PLUGINS", "stuckdev")
    for variable in ("ACCELCTL_ACCELERATOR", "ACCELCTL_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    fake_site.install("acme-stuckdev", {"stuckdev": "fakeplugins.waiting:WaitsInParseDevices"})
    with pytest.raises(PluginHookError) as caught:
        resolve_in_time(asked, "auto")
    assert str(caught.value).startswith(
        f"accelerator 'stuckdev' (acme-stuckdev 1.0): parse_devices() did not answer within "
        f"{DEADLINE_S} s"
    )


def test_no_module_but_the_fan_out_knows_the_deadline() -> None:
    # The handle, the registry, the selection, the stats, the CLI and the conformance kit call
    # plugins in the caller's thread or ask the fan-out: only the fan-out (and the settings,
    # which read the variable) refer to the deadline and its clock.
    root = Path(accelctl.__file__).parent
    names = (
        "hook_timeout(",
        "Unclocked",
        "off_clock",
        "deadline_paused",
        "_local.run",
        "running[",
    )
    knowing = {
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        for name in names
        if name in path.read_text()
    }
    assert knowing == {"_host/fanout.py", "_contract/settings.py"}


# -- one, inline ----------------------------------------------------------------------------


def test_a_named_lookup_calls_every_hook_in_the_callers_thread(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.install("acme-good", {"good": "fakeplugins.recording:RecordsThreads"})

    def no_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("a named lookup started a thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    selection = resolve("good", devices=1, environ={})  # the process-wide registry, by name
    selection.accelerator.device_stats(selection.devices[0])
    # The current device is per thread (torch.cuda.current_device()): hooks run where the
    # caller runs.
    assert sys.modules["fakeplugins.recording"].THREADS == [threading.get_ident()] * 4


def test_a_fit_calls_every_hook_in_the_callers_thread(
    fake_site: FakeSite, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import torch
    from torch import nn

    fake_site.install("acme-good", {"good": "fakeplugins.recording:RecordsThreads"})

    class Line(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(2, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.linear(batch).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    # The plugin's figures are read at each logging window (every step here), by the fit.
    trainer = accelctl.Trainer(
        accelerator="good", devices=1, max_epochs=1, root_dir=tmp_path, log_every_n_steps=1,
        enable_progress_bar=False,
    )  # fmt: skip
    trainer.fit(Line(), [torch.ones(4, 2) for _ in range(2)])
    threads = sys.modules["fakeplugins.recording"].THREADS
    # detect, parse_devices, get_parallel_devices, then device_stats at each of the 2 windows
    assert len(threads) >= 5
    assert set(threads) == {threading.get_ident()}


def test_a_hook_call_through_a_handle_runs_no_other_accelctl_code_before_the_plugin(
    fake_site: FakeSite,
) -> None:
    fake_site.install("acme-deep", {"deep": "fakeplugins.recording:RecordsStack"})
    handle = Registry(path=fake_site.path).get("deep")
    frames = sys.modules["fakeplugins.recording"].FRAMES
    frames.clear()
    assert handle.detect() is True
    core = str(Path(accelctl.__file__).parent)
    ours = [name for name in frames if name.startswith(core)]
    # The handle's own code alone (no fan-out, no guard, no thread): a direct call is direct.
    assert ours and set(ours) == {str(Path(core) / "_host" / "handle.py")}


def test_a_named_plugin_that_fails_is_its_error_each_time(fake_site: FakeSite) -> None:
    fake_site.install("acme-flaky", {"flaky": "fakeplugins.hostile:DetectFailsWithOSError"})
    handle = Registry(path=fake_site.path).get("flaky")
    for _ in range(2):  # never cached as broken: each call is the plugin's own answer
        with pytest.raises(PluginHookError, match="driver gone"):
            handle.detect()


@pytest.fixture
def threads_asking(
    fake_site: FakeSite, gate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> Callable[[int], list[threading.Thread]]:
    """``threads_asking(count)`` lists the thread that asked each of ``count`` quick plugins.

    In the plugins' order.
    """

    def ask(count: int) -> list[threading.Thread]:
        asked_in: list[threading.Thread] = []
        monkeypatch.setattr(gate, "wait", lambda: asked_in.append(threading.current_thread()))
        for index in range(count):
            name = f"quick{index:02d}"
            fake_site.install(f"acme-{name}", {name: "fakeplugins.waiting:WaitsInDetect"})
        rows = Registry(path=fake_site.path).listing()
        assert [row.state for row in rows] == ["available"] * count
        assert len(asked_in) == count
        return asked_in

    return ask


def test_plugins_are_asked_from_a_fixed_pool_of_threads_never_the_callers(
    threads_asking: Callable[[int], list[threading.Thread]],
) -> None:
    # A fixed pool: at most the policy's threads however many plugins, each a daemon thread (the
    # interpreter's exit never waits for one), none of them the caller's (each plugin is under
    # its deadline there).
    workers = _fanout.Policy().workers
    asked_in = threads_asking(3 * workers)
    assert 1 <= len(set(asked_in)) <= workers
    assert all(thread.daemon for thread in asked_in)
    assert threading.current_thread() not in asked_in


def test_a_pool_is_as_large_as_its_items_up_to_the_policys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two items that each wait for the other: both are asked at once, by exactly two threads.
    barrier = threading.Barrier(2, timeout=BARRIER_GUARD_S)
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    class Item:
        def busy_with(self) -> str:
            return "probe()"

        def error_for(self, hook: str | None, problem: str) -> accelctl.AccelctlError:
            return accelctl.AccelctlError(problem)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    results = _fanout.run_each([Item(), Item()], lambda item: barrier.wait())
    assert sorted(results) == [0, 1]  # type: ignore[type-var]  # a broken barrier raises
    assert started == ["accelctl-plugin", "accelctl-plugin"]


def test_a_policy_of_one_worker_asks_one_plugin_at_a_time_in_one_thread(
    threads_asking: Callable[[int], list[threading.Thread]],
) -> None:
    # What the CLI's child sets to find which plugin crashed it; set_policy gives back the one
    # it replaced, so the process's own comes back.
    previous = _fanout.set_policy(_fanout.Policy(workers=1))
    try:
        asked_in = threads_asking(6)
    finally:
        assert _fanout.set_policy(previous) == _fanout.Policy(workers=1)
    assert len(set(asked_in)) == 1
    assert asked_in[0] is not threading.current_thread()  # off the caller's, under a deadline


def test_one_at_a_time_asks_in_one_thread_whatever_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_each(one_at_a_time=True), as plugins are imported, starts one thread, not the pool."""
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)

    class Item:
        def busy_with(self) -> str:
            return "probe()"

        def error_for(self, hook: str | None, problem: str) -> accelctl.AccelctlError:
            return accelctl.AccelctlError(problem)

    assert _fanout.Policy().workers > 1
    threads = _fanout.run_each(
        [Item() for _ in range(6)], lambda item: threading.current_thread(), one_at_a_time=True
    )
    assert len(set(threads)) == 1 and threads[0] is not threading.current_thread()
    assert started == ["accelctl-plugin"]


def test_a_policy_is_told_each_start_and_end_and_skips_whom_it_names() -> None:
    class Item:
        def __init__(self, name: str) -> None:
            self.name = name

        def busy_with(self) -> str:
            return "probe()"

        def error_for(self, hook: str | None, problem: str) -> accelctl.AccelctlError:
            return accelctl.AccelctlError(f"{self.name}: {problem}")

    told: list[tuple[bool, str]] = []
    items = [Item("a"), Item("crashed"), Item("b")]
    previous = _fanout.set_policy(
        _fanout.Policy(
            started=lambda item: told.append((True, item.name)),  # type: ignore[attr-defined]
            finished=lambda item: told.append((False, item.name)),  # type: ignore[attr-defined]
            skip={"crashed": Problem("it crashed the process that asked it")},
        )
    )
    try:
        results = _fanout.run_each(items, lambda item: item.name.upper())
    finally:
        _fanout.set_policy(previous)
    assert results[0] == "A" and results[2] == "B"
    assert str(results[1]) == "crashed: it crashed the process that asked it"
    assert sorted(told) == [(False, "a"), (False, "b"), (True, "a"), (True, "b")]


def test_a_late_plugins_error_is_made_by_what_was_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fan-out knows only the deadline: the item says what it is busy with and makes its
    # own error (a handle names the plugin first).
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "0.05")
    release = threading.Event()
    seen: list[tuple[str | None, str]] = []

    class Item:
        def busy_with(self) -> str:
            return "probe()"

        def error_for(self, hook: str | None, problem: str) -> accelctl.AccelctlError:
            seen.append((hook, problem))
            return accelctl.AccelctlError(f"item: {problem}")

    def stuck(item: Item) -> str:
        release.wait(BARRIER_GUARD_S)
        return "answered"

    try:
        [result] = _fanout.run_each([Item()], stuck)
    finally:
        release.set()
    assert seen == [
        (
            "probe",
            "probe() did not answer within 0.05 s (ACCELCTL_HOOK_TIMEOUT: how long accelctl waits "
            "for each plugin where it asks several at once)",
        )
    ]
    assert isinstance(result, accelctl.AccelctlError) and str(result) == f"item: {seen[0][1]}"


def test_an_unnamed_late_task_is_accelctls_own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_one without a plugin, past the deadline, says how long accelctl took."""
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "0.05")
    release = threading.Event()
    try:
        with pytest.raises(accelctl.AccelctlError) as caught:
            _fanout.run_one(lambda: release.wait(BARRIER_GUARD_S))
    finally:
        release.set()
    assert str(caught.value) == "accelctl did not finish within 0.05 s"


@pytest.mark.parametrize("raising", ["started", "finished"])
def test_a_policy_call_that_raises_is_the_items_error_not_a_silent_worker(
    raising: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A started() or finished() that raises ends its item at once, with what it raised."""
    # A worker gone silent would be the item's late error instead, after this hang guard.
    monkeypatch.setenv("ACCELCTL_HOOK_TIMEOUT", "30")

    class Item:
        name = "a"

        def busy_with(self) -> str:
            return "probe()"

        def error_for(self, hook: str | None, problem: str) -> accelctl.AccelctlError:
            return accelctl.AccelctlError(problem)

    def broken(item: object) -> None:
        raise accelctl.AccelctlError(f"{raising} broke")

    previous = _fanout.set_policy(_fanout.Policy(**{raising: broken}))
    try:
        [result] = _fanout.run_each([Item()], lambda item: "answered")
    finally:
        _fanout.set_policy(previous)
    assert isinstance(result, accelctl.AccelctlError) and str(result) == f"{raising} broke"

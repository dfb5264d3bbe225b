"""``accelctl stats``: real first readings, sane --watch intervals, and a reader that goes away."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import types

import pytest
from cliharness import Cli, FakeClock

import accelctl
from accelctl._readings import stats as _stats
from accelctl.cli import _child, stats_cmd

from fakedists import FakeSite

#: Hang guard of the subprocess test: far above what it takes.
HANG_GUARD_S = 120


class StepPsutil(types.ModuleType):
    """psutil whose cpu_times() steps through known samples and whose cpu_percent() says 0.0.

    0.0 is what psutil's says on a thread's first call (it keeps its previous sample per thread);
    each sample's time on ``clock`` is kept in :attr:`taken`.
    """

    def __init__(
        self, real: types.ModuleType, samples: list[tuple[float, float]], clock: FakeClock
    ) -> None:
        super().__init__("psutil")
        self._real = real
        self._samples = iter(samples)
        self._clock = clock
        self.taken: list[float] = []

    def cpu_times(self) -> object:
        self.taken.append(self._clock.monotonic())
        user, idle = next(self._samples)
        return Times(user=user, system=0.0, idle=idle)

    def cpu_percent(self, interval: float | None = None) -> float:
        return 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


Times = collections.namedtuple("Times", "user system idle")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    # What is read when, in this process: the clock is this process's (not the reading child's).
    monkeypatch.setattr(_child, "FORK", False)
    monkeypatch.setattr(stats_cmd, "time", clock)  # the --watch interval
    monkeypatch.setattr(_stats, "time", clock)  # the wait for a real first reading
    return clock


@pytest.fixture
def step_psutil(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> StepPsutil:
    import psutil

    import accelctl_cpu

    # Busy 10 of 100 s, then 40 of 150 s: 30 busy of the 50 s between the two, 60 %.
    step = StepPsutil(psutil, [(10, 90), (40, 110)], clock)
    monkeypatch.setitem(sys.modules, "psutil", step)
    monkeypatch.setattr(accelctl_cpu, "_previous_times", None)
    return step


def test_one_shot_cpu_percent_is_a_real_reading(
    cli: Cli, step_psutil: StepPsutil, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu")
    result = cli("stats", "--json")
    assert result.exit_code == 0, result.output
    [reading] = json.loads(result.stdout)
    assert reading["stats"]["cpu_percent"] == 60.0
    # The reading thrown away is followed by a pause long enough for psutil to measure.
    assert clock.sleeps == [_stats.FIRST_READING_WAIT_S] and clock.sleeps[0] >= 0.1
    first, shown = step_psutil.taken
    assert shown - first == _stats.FIRST_READING_WAIT_S


class SlowFirstPsutil(StepPsutil):
    """StepPsutil whose first sample costs ``cost`` seconds of the clock before it is taken.

    As an import of psutil, which the first reading pays, does on a loaded machine.
    """

    def __init__(
        self,
        real: types.ModuleType,
        samples: list[tuple[float, float]],
        clock: FakeClock,
        cost: float,
    ) -> None:
        super().__init__(real, samples, clock)
        self._cost = cost

    def cpu_times(self) -> object:
        if not self.taken:
            self._clock.advance(self._cost)
        return super().cpu_times()


@pytest.mark.parametrize(
    ("cost", "gap"),
    [
        (0.05, 0.15),  # inside the wait: shown 0.2 s after the CPU was found
        (0.15, _stats.READING_GAP_MIN_S),  # past what the wait leaves: the minimum gap
    ],
)
@pytest.mark.parametrize("named", [False, True], ids=["every", "named"])
def test_the_first_readings_own_cost_is_inside_the_wait_but_never_below_the_gap(
    cli: Cli,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    cost: float,
    gap: float,
    named: bool,
) -> None:
    import psutil

    import accelctl_cpu

    step = SlowFirstPsutil(psutil, [(10, 90), (40, 110)], clock, cost=cost)
    monkeypatch.setitem(sys.modules, "psutil", step)
    monkeypatch.setattr(accelctl_cpu, "_previous_times", None)
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu")
    found = clock.now  # nothing else moves this clock: the probe is when the command starts
    result = cli("stats", *(["cpu"] if named else []), "--json")
    assert result.exit_code == 0, result.output
    [reading] = json.loads(result.stdout)
    assert reading["stats"]["cpu_percent"] == 60.0
    first, shown = step.taken
    assert first == pytest.approx(found + cost)
    assert shown - first == pytest.approx(gap) and gap >= _stats.READING_GAP_MIN_S
    assert shown - found == pytest.approx(max(_stats.FIRST_READING_WAIT_S, cost + gap))


@pytest.mark.parametrize("named", [False, True], ids=["every", "named"])
def test_the_wait_runs_from_when_the_probe_found_the_accelerator(
    cli: Cli, fake_site: FakeSite, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, named: bool
) -> None:
    import importlib

    # Found after half a second of the test's clock; keeps when it read.
    fake_site.install("acme-late", {"late": "fakeplugins.clocked:SlowToFind"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "late")
    result = cli("stats", *(["late"] if named else []), "--json")
    assert result.exit_code == 0, result.output
    assert [reading["device"] for reading in json.loads(result.stdout)] == ["late:0", "late:1"]
    plugin = importlib.import_module("fakeplugins.clocked")
    [found] = plugin.FOUND
    assert found == 0.5  # the probe's own time is not part of the wait
    first, _, shown, _ = plugin.TAKEN  # two devices, read twice
    assert first == found and shown == found + _stats.FIRST_READING_WAIT_S


def test_the_wait_runs_from_when_the_last_probe_ended(
    cli: Cli,
    fake_site: FakeSite,
    step_psutil: StepPsutil,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every plugin is probed at once, then every available one read at once: the CPU's first
    # reading comes when the slow plugin's probe has ended, and the one shown the wait after.
    # Its probe takes half a second of the test's clock (its hardware is absent).
    fake_site.install("acme-slow", {"slow": "fakeplugins.clocked:SlowProbe"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,slow")
    result = cli("stats", "--json")
    assert result.exit_code == 0, result.output
    [reading] = json.loads(result.stdout)
    assert reading["accelerator"] == "cpu" and reading["stats"]["cpu_percent"] == 60.0
    assert clock.sleeps == [pytest.approx(_stats.FIRST_READING_WAIT_S)], result.stderr
    first, shown = step_psutil.taken
    assert first == 0.5 and shown - first == pytest.approx(_stats.FIRST_READING_WAIT_S)


def test_cpu_percent_compares_readings_made_in_different_threads(step_psutil: StepPsutil) -> None:
    # `accelctl stats` reads each round in worker threads of its own, the library in the
    # caller's: psutil.cpu_percent(), which keeps its sample per thread, would say 0.0.
    cpu = accelctl.get_accelerator("cpu")
    readings: list[float] = []
    for _ in range(2):
        thread = threading.Thread(
            target=lambda: readings.append(cpu.device_stats("cpu")["cpu_percent"])
        )
        thread.start()
        thread.join()
    assert readings == [0.0, 60.0]  # nothing to compare with yet, then the real reading


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e309", "1e-9", "0.01", "1e6"])
def test_watch_refuses_non_finite_and_absurd_intervals(
    cli: Cli, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def sleep(seconds: float) -> None:  # a refused interval must not get as far as sleeping
        raise AssertionError(f"slept {seconds}")

    monkeypatch.setattr(stats_cmd.time, "sleep", sleep)
    result = cli("stats", "--watch", value)
    assert result.exit_code == 2
    assert "Invalid value for '--watch'" in result.stderr
    assert "from 0.1 to 86400" in result.stderr


@pytest.mark.parametrize("value", ["0.1", "2", "86400"])
def test_watch_accepts_sane_intervals(value: str) -> None:
    assert stats_cmd._check_interval(None, None, float(value)) == float(value)  # type: ignore[arg-type]


@pytest.mark.slow
def test_watch_into_a_closed_pipe_ends_quietly() -> None:
    # `accelctl stats --watch 0.2 | head -1`: the reader leaves after one line.
    env = dict(os.environ, ACCELCTL_PLUGINS="cpu")
    process = subprocess.Popen(
        [sys.executable, "-m", "accelctl", "stats", "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline()
    process.stdout.close()
    try:
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=HANG_GUARD_S)
    finally:
        process.kill()
    assert stderr == ""
    assert code == 1  # click's answer to a closed pipe, as documented


# -- the library's reading, which `accelctl stats` prints -------------------------------------


def test_read_stats_is_the_library_reading_the_command_prints(
    fake_site: FakeSite, step_psutil: StepPsutil, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.install("acme-brk", {"brk": "fakeplugins.hostile:DetectFailsWithOSError"})
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu,brk")
    # A broken plugin is a reading with its error (issue 26: as when it is named), not a warning.
    reading, broken = accelctl.read_stats()
    assert (broken.accelerator, broken.device, broken.stats) == ("brk", "?", {})
    assert broken.error is not None and "detect() raised OSError" in broken.error
    assert isinstance(reading, accelctl.DeviceStats)
    assert reading.to_dict() == {
        "accelerator": "cpu",
        "device": "cpu",
        "stats": reading.stats,
        "error": None,
    }
    assert reading.stats["cpu_percent"] == 60.0  # a real rate: the first reading was thrown away
    assert clock.sleeps == [_stats.FIRST_READING_WAIT_S]


def test_watch_stats_waits_once_then_reads_each_round_when_asked(
    step_psutil: StepPsutil, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_PLUGINS", "cpu")
    step_psutil._samples = iter([(10, 90), (40, 110), (70, 130)])
    rounds = accelctl.watch_stats("cpu")
    first, second = next(rounds), next(rounds)
    assert [r.device for r in first] == [r.device for r in second] == ["cpu"]
    assert clock.sleeps == [_stats.FIRST_READING_WAIT_S]  # the caller paces the next rounds
    assert len(step_psutil.taken) == 3  # thrown away, then one per round


def test_read_stats_of_a_name_nothing_provides_is_the_lookups_error() -> None:
    with pytest.raises(accelctl.UnknownAcceleratorError, match="no accelerator named 'nosuch'"):
        accelctl.read_stats("nosuch")

"""``accelctl`` as the tests run it: in this process (CliRunner) or in a fresh interpreter.

The ``cli`` fixture (conftest.py) hands every test one of these.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from accelctl.cli import cli as accelctl_group

#: A hang guard for one command in a fresh interpreter (a second or two, minutes when loaded).
HANG_GUARD_S = 300


def _reject(constant: str) -> Any:
    raise ValueError(f"not strict JSON: {constant}")


def strict_json(text: str) -> Any:
    """Parse as strict parsers do: NaN and Infinity are not JSON."""
    return json.loads(text, parse_constant=_reject)


class Cli:
    """Run ``accelctl`` commands; see the module's docstring."""

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, input: str | None = None
    ) -> Result:
        """Run ``accelctl ARGS`` in this process (click's CliRunner).

        An exception the CLI does not handle fails the test.
        """
        return CliRunner().invoke(
            accelctl_group, list(args), env=env, input=input, catch_exceptions=False
        )

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        """The strict JSON document ``accelctl ARGS`` prints on stdout (``--json`` is added)."""
        result = self(*args, "--json", env=env)
        return strict_json(result.stdout)

    def process(
        self,
        *args: str,
        path: Sequence[str | Path] = (),
        env: dict[str, str] | None = None,
        autoload: bool = False,
        code: str | None = None,
        timeout: float = HANG_GUARD_S,
    ) -> subprocess.CompletedProcess[str]:
        """``accelctl ARGS`` in a fresh interpreter, as a user types it.

        :param path: folders put in front of ``PYTHONPATH`` (fake or pip-installed plugins).
        :param env: variables set for it; the caller's ``ACCELCTL_*`` choices are not passed
            on (the tests' hang guard ``ACCELCTL_HOOK_TIMEOUT`` is).
        :param autoload: torch's backend autoload on, as on a user's machine (conftest.py turns
            it off for the suite).
        :param code: run this Python code (with ARGS as its ``sys.argv[1:]``) instead of the
            console script.
        """
        environ = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("ACCELCTL_") or key == "ACCELCTL_HOOK_TIMEOUT"
        }
        if autoload:
            environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
        if path:
            current = [environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else []
            environ["PYTHONPATH"] = os.pathsep.join([*map(str, path), *current])
        environ.update(env or {})
        command = ["-c", code] if code is not None else ["-m", "accelctl"]
        return subprocess.run(
            [sys.executable, *command, *args],
            capture_output=True,
            text=True,
            env=environ,
            timeout=timeout,
        )


class FakeClock:
    """What ``accelctl stats`` reads of :mod:`time`, on a clock that moves only when told.

    It moves when it sleeps (:meth:`sleep`, recorded in :attr:`sleeps`) or when a test moves it
    (:meth:`advance`); ``on_sleep`` runs at each sleep (a test's Ctrl-C). Everything else is the
    real :mod:`time`.
    """

    def __init__(self) -> None:
        import time

        self._time = time
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: Any = None

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._time, name)

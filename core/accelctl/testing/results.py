"""The plain data of a conformance run.

One :class:`CheckResult` per check, a :class:`ValidationReport` per accelerator. ``accelctl
validate`` prints them; the pytest face turns each result into a passed, failed or skipped test."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "skip")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one conformance check on one accelerator.

    ``check`` is an id of :data:`accelctl.testing.CHECK_IDS`; ``detail`` is one line, what was seen
    or why; ``error``, the exception behind a failure (for ``--debug`` and pytest tracebacks), is
    never part of :meth:`to_dict`."""

    check: str
    status: Status
    detail: str
    error: BaseException | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {self.status!r}")
        object.__setattr__(self, "detail", " ".join(self.detail.split()))

    def to_dict(self) -> dict[str, str]:
        """``{"check", "status", "detail"}``, as ``accelctl validate --json`` prints it."""
        return {"check": self.check, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class ValidationReport:
    """Every check's result for one accelerator, in the order of :data:`accelctl.testing.CHECKS`.

    ``name`` is the canonical name (or the one asked for, when none matched); ``distribution``
    None for an object passed in directly; ``disabled`` why ``ACCELCTL_PLUGINS`` /
    ``ACCELCTL_DISABLE`` kept the plugin out (every check is then skipped).
    """

    name: str
    checks: tuple[CheckResult, ...]
    distribution: str | None = None
    version: str | None = None
    disabled: str | None = None

    @property
    def passed(self) -> bool:
        """True when no check failed (skipped checks do not fail a report)."""
        return not self.failures

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The checks that failed."""
        return tuple(result for result in self.checks if result.status == "fail")

    def count(self, status: Status) -> int:
        """How many checks ended with ``status``."""
        return sum(1 for result in self.checks if result.status == status)

    def result(self, check: str) -> CheckResult:
        """The result of the check with id ``check``; a ``KeyError`` names the ids there are."""
        for result in self.checks:
            if result.check == check:
                return result
        known = ", ".join(result.check for result in self.checks)
        raise KeyError(f"no check {check!r} in the report of {self.name!r} (checks: {known})")

    def summary(self) -> str:
        """Return the report's one-line summary.

        ``"passed (12 passed, 4 skipped)"``, ``"FAILED (2 failed, 10 passed, 4 skipped)"`` or
        ``"disabled by ACCELCTL_DISABLE; not imported, not validated"``."""
        if self.disabled:
            return f"{self.disabled}; not imported, not validated"
        parts = [f"{self.count(s)} {word}" for s, word in _WORDS.items() if self.count(s)]
        return f"{'passed' if self.passed else 'FAILED'} ({', '.join(parts) or 'no checks'})"

    def to_dict(self) -> dict[str, Any]:
        """Return the report as ``--json`` prints it.

        ``{"name", "passed", "disabled", "distribution", "version", "checks": [...]}`` for
        ``--json``; ``passed`` is null for a disabled plugin (nothing was validated)."""
        return {
            "name": self.name,
            "passed": None if self.disabled else self.passed,
            "disabled": self.disabled,
            "distribution": self.distribution,
            "version": self.version,
            "checks": [result.to_dict() for result in self.checks],
        }


_WORDS: dict[Status, str] = {"fail": "failed", "pass": "passed", "skip": "skipped"}


class Run:
    """Collects one accelerator's check results, in the order of ``ids``.

    The first result recorded for a check counts; :meth:`start` marks the check in progress (the one
    a plugin that stops answering is in)."""

    def __init__(self, name: str, ids: tuple[str, ...]) -> None:
        self.name = name
        self.ids = ids
        self.distribution: str | None = None
        self.version: str | None = None
        self.results: dict[str, CheckResult] = {}
        #: The check running now (for the report of a plugin that stopped answering).
        self.current: str | None = None

    def start(self, check: str) -> None:
        self.current = check

    def record(
        self, check: str, status: Status, detail: str, error: BaseException | None = None
    ) -> None:
        self.results.setdefault(check, CheckResult(check, status, detail, error))

    def passed(self, check: str, detail: str) -> None:
        self.record(check, "pass", detail)

    def failed(self, check: str, detail: str, error: BaseException | None = None) -> None:
        self.record(check, "fail", detail, error)

    def skipped(self, check: str, detail: str) -> None:
        self.record(check, "skip", detail)

    def skip_rest(self, detail: str) -> None:
        for check in self.ids:
            self.skipped(check, detail)

    def report(self, disabled: str | None = None) -> ValidationReport:
        return ValidationReport(
            name=self.name,
            checks=tuple(self.results[check] for check in self.ids),
            distribution=self.distribution,
            version=self.version,
            disabled=disabled,
        )

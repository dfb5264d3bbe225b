"""The pytest face of the conformance checks.

Subclass :class:`AcceleratorConformance` in a plugin package's tests, as the package docstring
shows.

pytest collects one test per check (``test_loads``, ...): a failed check fails its test with the
reason (the plugin's exception chained), one that cannot run here is a skip that says why. No
pytest plugin is needed; pytest is imported only when a test runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from accelctl.capabilities import CAPABILITIES

from .checks import CHECKS, Check, validate
from .matrix import CapabilityReport, probe_accelerator
from .results import ValidationReport


class ConformanceFailure(AssertionError):
    """A conformance check failed.

    The message is the check's reason, ``__cause__`` the plugin's own exception where there is
    one."""


_REPORTS: weakref.WeakKeyDictionary[type, ValidationReport] = weakref.WeakKeyDictionary()
_CAPABILITY_REPORTS: weakref.WeakKeyDictionary[type, CapabilityReport] = weakref.WeakKeyDictionary()


class AcceleratorConformance:
    """Base class of a pytest test class that runs every conformance check on one accelerator.

    The accelerator is :attr:`accelerator`, installed or not. The checks run once per class, on its
    first test; each ``test_<check>`` method then reports its own check."""

    #: The accelerator's name or alias, or a plugin object (instance, class or module).
    accelerator: ClassVar[object] = None
    #: Measure the plugin's import in a fresh interpreter (the ``import_is_light`` check).
    probe_import: ClassVar[bool] = True
    #: The capabilities the plugin claims, checked by ``test_capabilities`` against the capability
    #: matrix (``accelctl validate --capabilities``): a name of
    #: :data:`accelctl.capabilities.CAPABILITIES` to True (the device has it) or False (it does
    #: not, yet). Empty: nothing claimed, the test is skipped. Skipped where the device is absent.
    expected_capabilities: ClassVar[Mapping[str, bool]] = {}

    @classmethod
    def conformance_report(cls) -> ValidationReport:
        """The report of this class's accelerator, computed on first use and kept."""
        report = _REPORTS.get(cls)
        if report is None:
            report = validate(cls._subject(), probe_import=cls.probe_import)
            _REPORTS[cls] = report
        return report

    @classmethod
    def capability_report(cls) -> CapabilityReport:
        """Return this class's accelerator's capability matrix row, computed on first use.

        Probed in a fresh process for an installed name, and kept."""
        report = _CAPABILITY_REPORTS.get(cls)
        if report is None:
            report = probe_accelerator(cls._subject())
            _CAPABILITY_REPORTS[cls] = report
        return report

    @classmethod
    def _subject(cls) -> object:
        if cls.accelerator is None:
            raise TypeError(
                f"{cls.__name__} must say what to check: set the class attribute "
                'accelerator = "<name>" (installed) or an instance of your plugin class'
            )
        return cls.accelerator

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A class that claims capabilities gets a test for them; one that claims none has just
        # the checks' tests (no test that could only be skipped).
        if cls.expected_capabilities and "test_capabilities" not in vars(cls):
            cls.test_capabilities = _test_capabilities  # type: ignore[attr-defined]


def _test_capabilities(self: AcceleratorConformance) -> None:
    """Conformance: the capabilities expected_capabilities claims are what the device does."""
    import pytest

    cls = type(self)
    expected = dict(cls.expected_capabilities)
    unknown = sorted(set(expected) - set(CAPABILITIES))
    if unknown:
        raise ConformanceFailure(
            f"capabilities: expected_capabilities names {', '.join(map(repr, unknown))}, "
            f"which the matrix has not; its rows: {', '.join(CAPABILITIES)}"
        )
    report = cls.capability_report()
    if report.state in ("unavailable", "disabled"):
        pytest.skip(f"capabilities: needs the hardware: {report.state} here: {report.reason}")
    if report.state != "probed":
        raise ConformanceFailure(f"capabilities: {report.state}: {report.reason}")
    wrong = [
        f"{name}: expected {_yes(want)}, the device says {_yes(found.supported)} ({found.reason})"
        for name, want in expected.items()
        if (found := report.capability(name)).supported != want
    ]
    if wrong:
        raise ConformanceFailure(
            f"capabilities: {len(wrong)} of {len(expected)} expected capabilities differ:\n  "
            + "\n  ".join(wrong)
        )


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _test_for(check: Check) -> Callable[[AcceleratorConformance], None]:
    def test(self: AcceleratorConformance) -> None:
        result = type(self).conformance_report().result(check.id)
        if result.status == "skip":
            import pytest

            pytest.skip(f"{result.check}: {result.detail}")
        if result.status == "fail":
            raise ConformanceFailure(f"{result.check}: {result.detail}") from result.error

    test.__name__ = test.__qualname__ = f"test_{check.id}"
    test.__doc__ = f"Conformance: {check.title}."
    return test


# One test method per check, generated from the table, so the two faces cannot drift apart.
for _check in CHECKS:
    setattr(AcceleratorConformance, f"test_{_check.id}", _test_for(_check))
del _check


def assert_conforms(accelerator: object, **options: Any) -> ValidationReport:
    """Validate ``accelerator`` and raise :class:`ConformanceFailure` if any check failed.

    ``options`` as :func:`accelctl.testing.validate` takes them. The failure lists every failed
    check; returns the report when none failed."""
    report = validate(accelerator, **options)
    if not report.passed:
        lines = "\n".join(f"  {result.check}: {result.detail}" for result in report.failures)
        first = next((r.error for r in report.failures if r.error is not None), None)
        raise ConformanceFailure(
            f"accelerator {report.name!r} fails {len(report.failures)} conformance check(s):\n"
            f"{lines}"
        ) from first
    return report

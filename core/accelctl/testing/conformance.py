"""The pytest face of the conformance checks: subclass :class:`AcceleratorConformance` in a
plugin package's tests, as the package docstring shows.

pytest collects one test per check (``test_loads``, ...): a failed check fails its test with the
reason (the plugin's exception chained), one that cannot run here is a skip that says why. No
pytest plugin is needed; pytest is imported only when a test runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, ClassVar

from .checks import CHECKS, Check, validate
from .results import ValidationReport


class ConformanceFailure(AssertionError):
    """A conformance check failed; the message is the check's reason, ``__cause__`` the plugin's
    own exception where there is one."""


_REPORTS: weakref.WeakKeyDictionary[type, ValidationReport] = weakref.WeakKeyDictionary()


class AcceleratorConformance:
    """Base class of a pytest test class that runs every conformance check on one accelerator:
    :attr:`accelerator`, installed or not. The checks run once per class, on its first test; each
    ``test_<check>`` method then reports its own check."""

    #: The accelerator's name or alias, or a plugin object (instance, class or module).
    accelerator: ClassVar[object] = None
    #: Measure the plugin's import in a fresh interpreter (the ``import_is_light`` check).
    probe_import: ClassVar[bool] = True

    @classmethod
    def conformance_report(cls) -> ValidationReport:
        """The report of this class's accelerator, computed on first use and kept."""
        report = _REPORTS.get(cls)
        if report is None:
            if cls.accelerator is None:
                raise TypeError(
                    f"{cls.__name__} must say what to check: set the class attribute "
                    'accelerator = "<name>" (installed) or an instance of your plugin class'
                )
            report = validate(cls.accelerator, probe_import=cls.probe_import)
            _REPORTS[cls] = report
        return report


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
    """Validate ``accelerator`` (``options`` as :func:`accelctl.testing.validate` takes them) and
    raise :class:`ConformanceFailure` listing every failed check; the report when none failed."""
    report = validate(accelerator, **options)
    if not report.passed:
        lines = "\n".join(f"  {result.check}: {result.detail}" for result in report.failures)
        first = next((r.error for r in report.failures if r.error is not None), None)
        raise ConformanceFailure(
            f"accelerator {report.name!r} fails {len(report.failures)} conformance check(s):\n"
            f"{lines}"
        ) from first
    return report

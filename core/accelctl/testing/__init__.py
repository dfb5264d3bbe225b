"""Conformance checks for accelerator plugins, for ``accelctl validate`` and pytest.

The test class is :class:`AcceleratorConformance`, whose tests need pytest: ``pip install
'accelctl[testing]'``; everything else here runs without it.

Run them from the command line::

    accelctl validate hpu            # one line per check; exit 1 when one fails
    accelctl validate --json         # every installed accelerator, as JSON

or add the whole suite to a plugin's CI in one class:

.. code-block:: python

    import accelctl.testing

    class TestHPUConformance(accelctl.testing.AcceleratorConformance):
        accelerator = "hpu"          # or an instance: HPUAccelerator()

or call them from code: ``accelctl.testing.validate("hpu")`` returns a
:class:`ValidationReport` of :class:`CheckResult` (``check``, ``status``, ``detail``).

The capability matrix (``accelctl validate --capabilities``) says what a device can do for
training (autocast, DDP, FSDP2's needs, ...): :func:`probe_installed` and
:func:`probe_accelerator` give :class:`CapabilityReport` rows, each plugin probed in a fresh
process; the class attribute ``expected_capabilities`` of :class:`AcceleratorConformance` asserts
the capabilities a vendor claims.
:data:`CHECKS` lists what is checked; a check that needs hardware that is absent is skipped, so a
correct plugin passes on a machine without its device.

:func:`write_distribution` installs a fake plugin distribution into a folder (a ``.dist-info``
and its modules, as pip leaves them), for tests of what several installed plugins do together;
:class:`Registry` is a registry over chosen folders, and :func:`installed_plugins` makes the
process-wide one (the CLI's, ``resolve``'s) see only them.

The kit is a layer above the core: it imports the core (public names where there are some, and
the private modules docs/concepts.md section 4a lists), and no module of the core imports it.
``accelctl validate`` is its command (:mod:`accelctl.testing.command`), which the CLI finds
through the entry-point group ``accelctl.commands``.
"""

from __future__ import annotations

from accelctl._host.registry import Registry

from ._device_checks import BAD_DEVICE_SPECS, COMMON_STATS_KEYS, STATS_CALL_LIMIT_S
from ._distributions import installed_plugins, reset_registry, write_distribution
from ._plugin_checks import DETECT_CALL_LIMIT_S, DETECT_FIRST_CALL_LIMIT_S, IMPORT_LIMIT_S
from .checks import CHECK_IDS, CHECKS, Check, validate, validate_installed
from .conformance import AcceleratorConformance, ConformanceFailure, assert_conforms
from .matrix import PROBE_TIMEOUT_S, CapabilityReport, probe_accelerator, probe_installed
from .results import CheckResult, Status, ValidationReport

__all__ = [
    "BAD_DEVICE_SPECS",
    "CHECKS",
    "CHECK_IDS",
    "COMMON_STATS_KEYS",
    "DETECT_CALL_LIMIT_S",
    "DETECT_FIRST_CALL_LIMIT_S",
    "IMPORT_LIMIT_S",
    "PROBE_TIMEOUT_S",
    "STATS_CALL_LIMIT_S",
    "AcceleratorConformance",
    "CapabilityReport",
    "Check",
    "CheckResult",
    "ConformanceFailure",
    "Registry",
    "Status",
    "ValidationReport",
    "assert_conforms",
    "installed_plugins",
    "probe_accelerator",
    "probe_installed",
    "reset_registry",
    "validate",
    "validate_installed",
    "write_distribution",
]

"""The conformance checks (``accelctl validate``'s) and the tests' registry: this name is the
``accelctl-testing`` distribution's ``accelctl_testing`` (extra ``accelctl[testing]``), which
docs/writing-a-plugin.md shows in use."""

from accelctl._companions import companion

companion(__name__, "accelctl_testing", "accelctl-testing", "testing")

from accelctl_testing import *  # noqa: E402, F403 - the names, for type checkers

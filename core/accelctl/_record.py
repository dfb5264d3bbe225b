"""The plugin record: one per installed entry point, owned by the registry.

A record says who the plugin is (its :class:`~accelctl._loading.PluginOrigin`: name,
distribution, version, entry point) and how loading it went: its :data:`PluginState`, the
:data:`LoadStage` that failed and the error, and the handle once it loaded. The registry creates
the records when it scans the entry points and is the only one to change them; ``accelctl
list``, ``validate``, ``env``, ``stats``, selection and the Lightning bridge read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ._discovery import PluginEntry
from ._errors import AccelctlError
from ._handle import AcceleratorHandle
from ._loading import PluginOrigin

#: ``not-loaded``: found, not imported yet (or never to be, with ``--no-detect``);
#: ``loaded``: imported and registered, :attr:`PluginRecord.handle` is set;
#: ``disabled``: ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` keep it from being imported;
#: ``broken``: loading failed at :attr:`PluginRecord.stage` with :attr:`PluginRecord.error`.
PluginState = Literal["not-loaded", "loaded", "disabled", "broken"]

#: Where loading failed, in the order loading runs: the distribution's ``metadata`` cannot be
#: read; the entry point's ``name`` is not a valid accelerator name; two distributions claim the
#: name (``conflict``); the ``import`` raised; the class's ``instantiate`` raised; ``register``
#: refused the hooks (pluggy's validation, unknown or missing hooks).
LoadStage = Literal["metadata", "name", "conflict", "import", "instantiate", "register"]

#: Every stage, in the order loading runs.
LOAD_STAGES: tuple[LoadStage, ...] = (
    "metadata",
    "name",
    "conflict",
    "import",
    "instantiate",
    "register",
)


@dataclass(eq=False)
class PluginRecord:
    """One installed entry point of ``accelctl.accelerators`` and how loading it went.

    Read it; only the registry writes it (:meth:`accelctl._registry.Registry.load`).
    """

    entry: PluginEntry = field(repr=False)
    state: PluginState = "not-loaded"
    #: The stage that failed; None unless ``state == "broken"``.
    stage: LoadStage | None = None
    #: Why it is broken; None unless ``state == "broken"``.
    error: AccelctlError | None = field(default=None, repr=False)
    #: Why it is disabled (names the variable); None unless ``state == "disabled"``.
    reason: str | None = None
    #: The handle, once loaded.
    handle: AcceleratorHandle | None = field(default=None, repr=False)
    #: The plugin object once imported and instantiated, kept when ``register`` refused it (so
    #: the conformance checks can say which hooks are wrong).
    plugin: object | None = field(default=None, repr=False)

    @property
    def origin(self) -> PluginOrigin:
        """Who the plugin is: name, distribution, version, entry point."""
        entry = self.entry
        return PluginOrigin(
            name=entry.name,
            distribution=entry.distribution,
            version=entry.version,
            entry_point=entry.value,
        )

    @property
    def name(self) -> str:
        """The accelerator's canonical name, in lowercase (the entry point's name)."""
        return self.entry.name.lower()

    @property
    def distribution(self) -> str | None:
        """The distribution that declares the entry point."""
        return self.entry.distribution

    @property
    def version(self) -> str | None:
        """That distribution's version."""
        return self.entry.version

    @property
    def entry_point(self) -> str:
        """The entry point's value, ``"module"`` or ``"module:attr"``."""
        return self.entry.value

    def describe(self) -> str:
        """``"accelerator 'hpu' (accelctl-hpu 1.0)"``, the subject of every message about it."""
        return self.origin.describe()

"""How an installed accelerator fares here: a row of ``accelctl list``.

:class:`AcceleratorStatus`: a view of its handle plus what its hooks said in this one
listing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._base.text import one_line
from .._contract.errors import AccelctlError
from .._contract.info import AcceleratorInfo
from .handle import AcceleratorHandle

#: What a listing found, a row's :attr:`~AcceleratorStatus.state` (the ``state`` of
#: ``list --json``). Not the handle's :attr:`~accelctl.AcceleratorHandle.state`, which says how
#: loading went; the two agree where loading decides: a disabled handle is a disabled row, a broken
#: one a broken row (a loaded plugin whose hook fails in the listing is a broken row too).
RowState = Literal["available", "unavailable", "disabled", "broken", "not-run"]


@dataclass(frozen=True)
class AcceleratorStatus:
    """One installed accelerator and what its hooks said here.

    ``available`` and ``device_count`` are None where detection did not run; ``reason`` says why a
    working plugin is unavailable or disabled, ``error`` why a broken one is (in one line)."""

    accelerator: AcceleratorHandle
    available: bool | None = None
    device_count: int | None = None
    reason: str | None = None
    error: str | None = None
    info: AcceleratorInfo | None = None

    @classmethod
    def of(cls, handle: AcceleratorHandle) -> AcceleratorStatus:
        """Make the status from package metadata alone, without running plugin code.

        Disabled, broken (as known so far), else not run."""
        handle.identify()  # its metadata: a handle whose metadata cannot be read is broken
        if handle.state == "broken" and handle.error is not None:
            return cls(handle, error=one_line(handle.error))
        return cls(handle, reason=handle.reason)

    @property
    def name(self) -> str:
        """The accelerator's name (``openreg``; the handle's :attr:`~AcceleratorHandle.name`)."""
        return self.accelerator.name

    @property
    def plugin_name(self) -> str:
        """The plugin's own name, its entry point's (``privateuse1``)."""
        return self.accelerator.plugin_name

    @property
    def distribution(self) -> str | None:
        """The distribution that installed the plugin."""
        return self.accelerator.distribution

    @property
    def version(self) -> str | None:
        """That distribution's version."""
        return self.accelerator.version

    @property
    def family(self) -> str | None:
        """The accelerator's family (``"gpu"``), where its info was read."""
        return self.info.family if self.info else None

    @property
    def priority(self) -> int | None:
        """Its priority under ``"auto"``, where its info was read."""
        return self.info.priority if self.info else None

    @property
    def description(self) -> str | None:
        """Its description, where its info was read."""
        return self.info.description if self.info else None

    @property
    def state(self) -> RowState:
        """Return what this listing found, one of :data:`RowState`.

        ``"available"``, ``"unavailable"``, ``"disabled"``, ``"broken"`` or ``"not-run"`` (see
        :data:`RowState`)."""
        if self.error is not None:
            return "broken"
        if self.accelerator.state == "disabled":
            return "disabled"
        if self.available is None:
            return "not-run"
        return "available" if self.available else "unavailable"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``accelctl list --json``."""
        info = self.info
        return {
            "name": self.name,
            "plugin": self.plugin_name,
            "available": self.available,
            "device_count": self.device_count,
            "family": self.family,
            "priority": self.priority,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.accelerator.entry_point,
            "description": self.description,
            "distributed_backend": info.distributed_backend if info else None,
            "aliases": list(info.aliases) if info else [],
            "state": self.state,
            "reason": self.reason,
            "error": self.error,
        }


def probe(handle: AcceleratorHandle) -> AcceleratorStatus:
    """Load the plugin and ask what ``accelctl list`` shows, never raising for its failure.

    Its info, whether it is detected, its devices or why not, each through the handle's own hook
    method. Never raises for the plugin's failure (the status says it)."""
    if handle.state == "disabled":
        return AcceleratorStatus(handle, reason=handle.reason)
    handle.load()
    if handle.state != "loaded":
        return AcceleratorStatus(handle, error=one_line(handle.error or "not loaded"))
    try:
        info = handle.info
        if handle.detect():
            return AcceleratorStatus(handle, True, handle.auto_device_count(), info=info)
        return AcceleratorStatus(handle, False, 0, handle.unavailable_reason(), info=info)
    except AccelctlError as exc:
        return AcceleratorStatus(handle, error=one_line(exc))


def settle(
    handles: Sequence[AcceleratorHandle], probed: Sequence[AcceleratorStatus | AccelctlError]
) -> list[AcceleratorStatus]:
    """Return the statuses of a probe of ``handles``, a late plugin as a broken row.

    A late plugin is one whose :class:`~accelctl.AccelctlError` is in ``probed``."""
    return [
        result
        if isinstance(result, AcceleratorStatus)
        else AcceleratorStatus(handle, error=one_line(result))
        for handle, result in zip(handles, probed, strict=True)
    ]

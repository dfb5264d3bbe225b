"""The registry: a handle per installed entry point, by canonical name, from one scan.

Entry points are read once per registry (once per process for the default one), and
``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` with them. A lookup by canonical name loads that
plugin alone, inline; an alias asks every enabled plugin at once (:mod:`accelctl._host.fanout`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import EntryPoint

from .._base.project import ENTRY_POINT_GROUP, RESERVED_NAMES
from .._base.text import one_line, quote
from .._base.typos import nearest
from .._contract import settings
from .._contract.errors import (
    AccelctlError,
    PluginConflictError,
    PluginWarning,
    UnknownAcceleratorError,
    warn_user,
)
from .._contract.info import is_valid_name
from . import fanout
from .discovery import TORCH_BACKENDS_GROUP, Found, read_identity, scan
from .handle import AcceleratorHandle
from .status import AcceleratorStatus, probe, settle

#: The accelerators whose plugin this project ships (``plugins/``), and its distribution: the only
#: names an error answers with ``pip install <distribution>`` (ROCm GPUs are torch's "cuda" device,
#: served by the CUDA plugin under the alias "rocm").
SHIPPED = {
    "cpu": "accelctl-cpu",
    "cuda": "accelctl-cuda",
    "rocm": "accelctl-cuda",
    "mps": "accelctl-mps",
    "xpu": "accelctl-xpu",
}
#: Other vendors' accelerators, known by name only: a typo of one is suggested, but no package is
#: named for them (accelctl knows of none published).
OTHER_CHIPS = ("hpu", "npu", "tpu")
#: Every name a typo is compared with when nothing installed is near it.
WELL_KNOWN = (*SHIPPED, *OTHER_CHIPS)
#: Longer names get no "accelctl-<name>" hint: no plugin package is called so.
_LONGEST_HINTED_NAME = 64


def load_each(handles: Sequence[AcceleratorHandle]) -> None:
    """Import the plugins of ``handles`` not imported yet, one after the other.

    Done before they are asked at once: each import is watched for what it does to ``sys.path`` and
    the ``ACCELCTL_*`` variables, which two imports at once would leave to the wrong plugin. Each
    has the fan-out's deadline; one given up stays its handle's (the fan-out does not ask it again
    while its thread runs: the next fan-out over the same handles gives its late error)."""
    waiting = [handle for handle in handles if handle.state == "not-loaded"]
    if waiting:
        fanout.run_each(waiting, AcceleratorHandle.load, one_at_a_time=True)


class Registry:
    """The accelerator plugins installed on ``path``.

    ``path`` defaults to ``sys.path``; ``environ`` is where ``ACCELCTL_PLUGINS`` /
    ``ACCELCTL_DISABLE`` are read at the first scan."""

    def __init__(
        self, path: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._path = None if path is None else list(path)
        self._environ = environ
        self._by_name: dict[str, list[AcceleratorHandle]] | None = None
        self.plugin_filter = settings.PluginFilter()
        self._torch_backends: list[Found] = []

    def _scan(self) -> dict[str, list[AcceleratorHandle]]:
        if self._by_name is None:
            self.plugin_filter = settings.PluginFilter.read(self._environ)
            claims: dict[str, list[Found]] = {}
            for found in scan(self._path):
                if found.group == TORCH_BACKENDS_GROUP:
                    self._torch_backends.append(found)
                elif found.group == ENTRY_POINT_GROUP:
                    claims.setdefault(found.name.lower(), []).append(found)
            by_name: dict[str, list[AcceleratorHandle]] = {}
            for name, founds in claims.items():
                reason = self.plugin_filter.blocked_reason(name)
                conflict = None
                if len(founds) > 1:  # a conflict: one row each, by distribution
                    owners = {
                        id(found): read_identity(found.origin).distribution or ""
                        for found in founds
                    }
                    founds.sort(key=lambda found: owners[id(found)])
                    if not reason:
                        conflict = _conflict(name, [owners[id(found)] for found in founds])
                by_name[name] = [
                    AcceleratorHandle(
                        name,
                        EntryPoint(found.name, found.value, found.group),
                        found.origin,
                        found.problem,
                        disabled=reason,
                        conflict=conflict,
                    )
                    for found in founds
                ]
            self._by_name = dict(sorted(by_name.items()))
        return self._by_name

    def torch_backends(self) -> list[Found]:
        """The ``torch.backends`` entry points (what ``import torch`` loads) the same scan found."""
        self._scan()
        return list(self._torch_backends)

    def plugins(self) -> list[AcceleratorHandle]:
        """Every installed entry point's handle, by name then distribution; nothing loaded."""
        return [handle for handles in self._scan().values() for handle in handles]

    def names(self) -> list[str]:
        """Canonical names of every installed accelerator (disabled and broken included)."""
        return list(self._scan())

    def typed_names(self) -> dict[str, str]:
        """Return every name a user can type for an installed accelerator, as messages name it.

        Its name (``'openreg'``), the aliases its loaded plugin answers to (``'rocm'``), and a
        plugin's own name where it is not the accelerator's (``'privateuse1' (the plugin of
        'openreg')``). Read from what the plugins said when loaded: no hook is called."""
        typed: dict[str, str] = {}
        for handle in self.plugins():
            typed.setdefault(handle.name, repr(handle.name))
            for alias in handle._info.aliases if handle._info is not None else ():
                typed.setdefault(alias, repr(alias))
            if handle.plugin_name != handle.name:
                typed.setdefault(
                    handle.plugin_name, f"{handle.plugin_name!r} (the plugin of {handle.name!r})"
                )
        return typed

    def shown_names(self) -> list[str]:
        """List the installed accelerators as a message names them.

        Each by its name, with the other aliases a user can type for it (``cuda (or rocm)``); a
        plugin's own name where it is not the accelerator's is left to ``accelctl list``'s PLUGIN
        column."""
        shown: dict[str, None] = {}
        for handle in self.plugins():
            info = handle._info
            others = [a for a in info.aliases if a != handle.name] if info is not None else []
            shown[f"{handle.name} (or {', '.join(others)})" if others else handle.name] = None
        return list(shown)

    def claimants(self, name: str) -> list[AcceleratorHandle]:
        """The handles of the entry points named ``name`` (more than one is a conflict)."""
        return list(self._scan().get(name.lower(), ()))

    def named(self, name: object) -> AcceleratorHandle | None:
        """Return the one handle whose canonical name is ``name``, not loaded; else None.

        ``name`` in any case; None for anything else (``"auto"``, an alias, a name claimed twice,
        not a str)."""
        if not isinstance(name, str):
            return None
        handles = self._scan().get(name.strip().lower(), [])
        return handles[0] if len(handles) == 1 else None

    def enabled(self) -> list[AcceleratorHandle]:
        """Every handle that ``ACCELCTL_PLUGINS`` / ``ACCELCTL_DISABLE`` leave enabled."""
        return [handle for handle in self.plugins() if handle.state != "disabled"]

    def get(self, name: str) -> AcceleratorHandle:
        """The loaded accelerator called ``name`` (canonical name or alias, any case).

        :raises UnknownAcceleratorError, AcceleratorUnavailableError, PluginLoadError: nothing
            has that name, it is disabled, or it failed to load or is claimed twice.
        """
        if not isinstance(name, str):
            raise TypeError(f"accelerator name must be a str, not {type(name).__name__}")
        key = name.strip().lower()
        if key in RESERVED_NAMES:
            raise UnknownAcceleratorError(
                f"{key!r} selects an accelerator, it is not one: use "
                f"accelctl.resolve({key!r}) or `accelctl resolve --accelerator {key}`",
                name=key,
                installed=[handle.name for handle in self.plugins()],
            )
        handles = self._scan().get(key)
        if handles:
            return handles[0].check()
        enabled = self.enabled()
        load_each(enabled)
        asked = fanout.run_each(enabled, lambda handle: handle.check().info.aliases)
        owners = [
            handle
            for handle, aliases in zip(enabled, asked, strict=True)
            if not isinstance(aliases, AccelctlError) and key in aliases
        ]
        if len(owners) > 1:
            claimants = [f"{h.plugin_name} ({h.distribution or 'no distribution'})" for h in owners]
            raise PluginConflictError(
                f"alias {key!r} is claimed by {' and '.join(claimants)}; use a canonical name",
                name=key,
                distributions=[h.distribution or h.plugin_name for h in owners],
            )
        if owners:
            return owners[0]
        unanswered = [
            (handle, aliases)
            for handle, aliases in zip(enabled, asked, strict=True)
            # loaded, but late or failing in accelerator_info(): a broken one is its own error
            if isinstance(aliases, AccelctlError) and handle.state != "broken"
        ]
        raise self.unknown(name, unanswered)

    def listing(self, detect: bool = True) -> list[AcceleratorStatus]:
        """List every installed accelerator and how it fares here, all probed at once.

        What :func:`accelctl.list_accelerators` returns for the process-wide registry."""
        plugins = self.plugins()
        if not detect:
            return [AcceleratorStatus.of(handle) for handle in plugins]
        load_each(plugins)
        return settle(plugins, fanout.run_each(plugins, probe))

    def candidates(self) -> list[AcceleratorStatus]:
        """Return every enabled accelerator, probed at once, for ``"auto"`` and ``"gpu"``.

        A broken one is named in a :class:`~accelctl.PluginWarning`."""
        enabled = self.enabled()
        load_each(enabled)
        statuses = settle(enabled, fanout.run_each(enabled, probe))
        for status in statuses:
            if status.error is not None:
                warn_user(f"skipping {status.error}", PluginWarning)
        return statuses

    def unknown(
        self,
        asked: str,
        unanswered: Sequence[tuple[AcceleratorHandle, AccelctlError]] = (),
    ) -> UnknownAcceleratorError:
        """Return the error for a name that nothing installed provides.

        What is, the nearest name, and the plugin to install. ``unanswered``: the plugins that could
        not say their aliases (late past the hook deadline, or failing in accelerator_info()), any
        of which may be the one asked for."""
        key = asked.strip().lower()
        typed = self.typed_names()
        installed = list(dict.fromkeys(handle.name for handle in self.plugins()))
        # "gpus" is a typo of the selector "gpu", not the name of a plugin to install.
        close = nearest(key, [*typed, *sorted(RESERVED_NAMES)])
        shown = ", ".join(self.shown_names()) or "none"
        filters = ""
        if self.plugin_filter.active:
            filters = f" ({settings.PLUGINS}/{settings.DISABLE} are set)"
        message = f"no accelerator named {quote(asked)} is installed (installed: {shown}){filters}."
        if close:  # a typo of something installed: no package to install
            message += f" Did you mean {typed.get(close, repr(close))}?"
            if not is_valid_name(key):
                message += " Accelerator names are lowercase letters, digits, '_' and '-'."
            return UnknownAcceleratorError(message, name=key, installed=installed)
        if unanswered:  # the name may well be installed: say which plugin could not answer
            who = "; ".join(
                f"{handle.plugin_name}: {one_line(error)}" for handle, error in unanswered
            )
            return UnknownAcceleratorError(
                f"{message} It may be an alias of a plugin that could not say its aliases ({who}).",
                name=key,
                installed=installed,
            )
        # A typo of a well-known accelerator that is not installed: point at its plugin.
        name = key if key in WELL_KNOWN else nearest(key, WELL_KNOWN) or key
        if name != key:
            message += f" Did you mean {name!r}?"
        if not is_valid_name(name):  # no package can be named after it
            message += " Accelerator names are lowercase letters, digits, '_' and '-'."
        elif len(name) <= _LONGEST_HINTED_NAME:
            message += " " + install_hint(self, name)
        return UnknownAcceleratorError(message, name=key, installed=installed)


def install_hint(registry: Registry, name: str) -> str:
    """Say what to install for ``name``.

    ``pip install <distribution>`` for a plugin this project ships; for any other name, the
    conventional ``accelctl-<name>``, worded as a vendor's to publish, never as a package that
    exists. When that distribution is installed already, a pointer to its row in ``accelctl
    list``."""
    distribution = SHIPPED.get(name, f"accelctl-{name}")
    installed = {h.distribution for h in registry.plugins()}
    if distribution in installed:
        return (
            f"{distribution} is installed but offers no {name!r} on this machine (see "
            "`accelctl list`)"
        )
    if name in SHIPPED:
        return f"Install its plugin: pip install {distribution}"
    return (
        f"No plugin for {name!r} is known to accelctl; if its vendor publishes one (by "
        f"convention named {distribution}), pip install that"
    )


def _conflict(name: str, owners: list[str]) -> PluginConflictError:
    """The error of ``name`` claimed by the distributions ``owners``."""
    distributions = sorted({owner or "?" for owner in owners})
    return PluginConflictError(
        f"accelerator name {name!r} is claimed by {len(owners)} distributions: "
        f"{' and '.join(distributions)}; uninstall one of them "
        f"(pip uninstall {distributions[-1]})",
        name=name,
        distributions=distributions,
    )


_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry over ``sys.path`` (entry points are read once)."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def set_registry(registry: Registry | None) -> Registry | None:
    """Replace the process-wide registry (None: scan again on next use); returns the old one."""
    global _default
    previous, _default = _default, registry
    return previous


def get_accelerator(name: str) -> AcceleratorHandle:
    """Return a handle on the loaded accelerator called ``name``.

    ``name`` is a canonical name or alias, in any case; a canonical name imports that plugin
    alone."""
    return get_registry().get(name)


def list_accelerators(detect: bool = True) -> list[AcceleratorStatus]:
    """List every installed accelerator and how it fares here, never raising for a broken one.

    A broken one's ``error`` says why. ``detect=False`` reads package metadata only and runs
    no plugin code."""
    return get_registry().listing(detect)

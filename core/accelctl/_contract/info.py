"""What a plugin says about its accelerator: :class:`AcceleratorInfo`."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .._base.text import safe_repr

#: Families the core knows; ``"gpu"`` is what ``accelerator="gpu"`` chooses from.
KNOWN_FAMILIES = frozenset({"gpu"})

_NAME_RE = re.compile(r"^[a-z0-9_-]+$")
_DEVICE_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def is_valid_name(name: str) -> bool:
    """True when ``name`` has the form of a canonical accelerator name or alias."""
    return bool(_NAME_RE.fullmatch(name))  # not match(): "$" also matches before a final "\n"


R = TypeVar("R")


def from_fields(cls: type[R], fields: Mapping[str, Any]) -> R:
    """``cls(**fields)`` for a dataclass of plain data a hook returned as a dict.

    :raises ValueError: naming each field ``cls`` does not have, and those it accepts.
    """
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"unknown {cls.__name__} field(s) {', '.join(map(repr, unknown))}; "
            f"accepted: {', '.join(sorted(known))}"
        )
    return cls(**fields)


@dataclass(frozen=True)
class AcceleratorInfo:
    """Description, family, priority, backend, aliases and device type of one accelerator.

    From the optional ``accelerator_info`` hook (a dict of these fields is accepted too). Checked on
    creation (a ``TypeError``/``ValueError`` names the field); aliases are lower-cased into a
    tuple."""

    description: str = ""
    family: str | None = None
    priority: int = 0
    distributed_backend: str | None = None
    aliases: tuple[str, ...] = ()
    #: torch's device type where it is not the canonical name (``privateuse1``'s ``openreg:i``):
    #: what ``accelctl stats``, without torch, names devices by (``"<device_type>:<index>"``).
    device_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a str, not {type(self.description).__name__}")
        if self.family is not None and not isinstance(self.family, str):
            raise TypeError(f"family must be a str or None, not {type(self.family).__name__}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(f"priority must be an int, not {type(self.priority).__name__}")
        backend = self.distributed_backend
        if backend is not None and not isinstance(backend, str):
            raise TypeError(
                f"distributed_backend must be a str or None, not {type(backend).__name__}"
            )
        aliases = self.aliases
        if not isinstance(aliases, (list, tuple, set, frozenset)):
            raise TypeError(f"aliases must be a tuple or list of str, not {type(aliases).__name__}")
        normalised = []
        for alias in aliases:
            if not isinstance(alias, str) or not is_valid_name(alias.strip().lower()):
                raise ValueError(
                    f"alias {safe_repr(alias)} is not a lowercase name matching [a-z0-9_-]+"
                )
            normalised.append(alias.strip().lower())
        object.__setattr__(self, "aliases", tuple(dict.fromkeys(normalised)))
        kind = self.device_type
        if kind is not None and (not isinstance(kind, str) or not _DEVICE_TYPE_RE.match(kind)):
            raise ValueError(
                f"device_type {kind!r} is not a torch device type (lowercase [a-z0-9_], such "
                "as 'cuda'), or None for the accelerator's own name"
            )
        if self.family is not None:
            object.__setattr__(self, "family", self.family.lower())

    @classmethod
    def coerce(cls, value: AcceleratorInfo | dict[str, Any]) -> AcceleratorInfo:
        """Accept an ``AcceleratorInfo`` or a dict of its fields; reject anything else."""
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return from_fields(cls, value)
        raise TypeError(
            f"expected an AcceleratorInfo or a dict of its fields, not {type(value).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready plain data."""
        data = dataclasses.asdict(self)
        data["aliases"] = list(self.aliases)
        return data

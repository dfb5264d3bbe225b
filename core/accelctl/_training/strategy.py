"""The ``strategy`` argument: how a fit spreads the model over its processes."""

from __future__ import annotations

import difflib
from typing import Any

from .._contract.errors import TrainerError

#: Accepted values of ``Trainer(strategy=...)``, in the order messages list them.
STRATEGIES = ("auto", "ddp", "fsdp")
#: What each one does, for messages and the docs.
_MEANINGS = {
    "auto": "DDP with several processes, the model as it is with one",
    "ddp": "the same, said explicitly",
    "fsdp": "FSDP2's fully_shard: parameters, gradients and optimizer states sharded",
}
#: Other frameworks' names for the same settings, and the value the message suggests instead.
_NEAREST = {"fsdp2": "fsdp", "fully_shard": "fsdp", "ddp_spawn": "ddp", "dp": "ddp"}


def parse_strategy(strategy: Any) -> str:
    """Normalise ``strategy`` to one of :data:`STRATEGIES` (white space and case ignored).

    :raises TrainerError: for anything else, listing the accepted values and the nearest one.
    """
    key = strategy.strip().lower() if isinstance(strategy, str) else ""
    if key in STRATEGIES:
        return key
    near = _NEAREST.get(key) or next(
        iter(difflib.get_close_matches(key, STRATEGIES, n=1, cutoff=0.6)), None
    )
    hint = f' (did you mean "{near}"?)' if near else ""
    accepted = "; ".join(f'"{name}": {meaning}' for name, meaning in _MEANINGS.items())
    raise TrainerError(f"strategy={strategy!r} is not accepted{hint}. Accepted: {accepted}")

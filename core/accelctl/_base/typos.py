"""What counts as a typo of a name, for "Did you mean ...?" (docs/concepts.md section 6).

A slip is one keystroke gone wrong: a letter added, dropped or changed, or two neighbouring
letters swapped. A name is suggested when the asked one is a slip or two away from it, no more:

- names of 3 letters or fewer (``cpu``, ``hpu``, ``npu``, ``tpu``, ``xpu``, ``mps``): one slip,
  and not a changed letter. Short accelerator names differ from each other by one letter, so
  ``tpu`` is another chip, not a typo of ``xpu``; ``cpus``, ``cpuu`` and ``pcu`` are typos of
  ``cpu``;
- names of 4 to 7 letters: one slip of any kind (``cdua``, ``cudo``);
- names of 8 letters or more: two slips (``privteuse1``).

The length is the shorter of the two names'. Where two names are equally near, neither is
suggested: the user's intent cannot be told.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Names this short never take a changed letter as a typo: they are one letter apart already.
_SHORT = 3
#: From this length, two slips are still a typo.
_LONG = 8


def nearest(asked: str, names: Iterable[str]) -> str | None:
    """Return the one name of ``names`` that ``asked`` is a typo of, or None.

    None when none is, or several are equally near."""
    by_slips: dict[int, list[str]] = {}
    for name in dict.fromkeys(names):
        count = slips(asked, name)
        if count is not None:
            by_slips.setdefault(count, []).append(name)
    if not by_slips:
        return None
    closest = by_slips[min(by_slips)]
    return closest[0] if len(closest) == 1 else None


def slips(asked: str, name: str) -> int | None:
    """Count the slips that turn ``name`` into ``asked``, when few enough to be a typo.

    Few enough by the module's rule; else None."""
    shorter = min(len(asked), len(name))
    allowed = 2 if shorter >= _LONG else 1
    if abs(len(asked) - len(name)) > allowed:  # also keeps the distance cheap for long input
        return None
    count = _distance(asked, name)
    if count > allowed:
        return None
    if shorter <= _SHORT and count == 1 and len(asked) == len(name):
        differing = sum(a != b for a, b in zip(asked, name, strict=True))
        if differing == 1:  # a changed letter, not two swapped ones: another short name
            return None
    return count


def _distance(a: str, b: str) -> int:
    """Return the optimal string alignment distance between two strings.

    Insertions, deletions, substitutions and swaps of neighbouring letters, one each."""
    previous: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        before, previous, row = previous, row, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], before[j - 2] + 1)
    return row[len(b)]

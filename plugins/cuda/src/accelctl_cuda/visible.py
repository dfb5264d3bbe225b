"""Which GPUs a process may use, read as the runtimes read them.

``CUDA_VISIBLE_DEVICES``, and the ROCm variables, read as the runtimes read them.

The CUDA runtime's rules, followed here so that the count matches what ``torch.cuda`` will see:

- unset: every GPU; set to the empty string: none;
- a comma-separated list of entries, each a device index (``"1"``; like ``strtoul``, ``"1gpu"``
  reads as 1), a ``GPU-`` UUID or a unique prefix of one, or a ``MIG-`` instance UUID;
- the first entry that is none of these (or an index out of range, or a UUID that matches no GPU
  or several) ends the list: ``"0,1,-1,2"`` is ``0,1``;
- a GPU named twice hides every GPU;
- a process sees one MIG instance at most (CUDA enumerates only the first one listed).

ROCm (torch's HIP build): ``ROCR_VISIBLE_DEVICES`` filters the physical GPUs first; then
``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP also honours) picks among those by
index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The names live in ``variables``: every probe needs them, this module only a machine with a driver.
from .variables import CUDA_VAR, HIP_VAR, ROCR_VAR

_LEADING_INT = re.compile(r"^\+?(\d+)")


def parse_entries(value: str) -> list[int | str]:
    """Split a ``*_VISIBLE_DEVICES`` value into indices and UUID strings.

    It stops at the first entry that is neither: the runtime ignores it and everything after
    it.
    """
    entries: list[int | str] = []
    if not value.strip():
        return entries
    for raw in value.split(","):
        item = raw.strip()
        if item[:4].upper() in ("GPU-", "MIG-"):
            entries.append(item[:4].upper() + item[4:].lower())
            continue
        match = _LEADING_INT.match(item)
        if match is None:
            break
        entries.append(int(match.group(1)))
    return entries


@dataclass(frozen=True)
class PhysicalGpu:
    """A GPU as NVML numbers it, with its UUID and those of its MIG instances."""

    index: int
    uuid: str
    mig_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class VisibleGpu:
    """One device of ``torch.cuda``, in CUDA's numbering: where NVML finds it."""

    physical_index: int
    uuid: str
    #: Set when the device is a MIG instance (NVML reads it through the MIG handle).
    mig_uuid: str | None = None


def _match_prefix(prefix: str, uuids: Sequence[str]) -> int | None:
    """Index of the one UUID starting with ``prefix`` (case-insensitive); None: none or several."""
    hits = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(prefix.lower())]
    return hits[0] if len(hits) == 1 else None


def visible_nvidia(
    gpus: Sequence[PhysicalGpu], environ: Mapping[str, str]
) -> tuple[VisibleGpu, ...]:
    """The GPUs ``torch.cuda`` will see, in its order, given NVML's ``gpus`` and the environment."""
    value = environ.get(CUDA_VAR)
    if value is None:
        return tuple(VisibleGpu(gpu.index, gpu.uuid) for gpu in gpus)
    chosen: list[VisibleGpu] = []
    seen: set[str] = set()
    for entry in parse_entries(value):
        found = _resolve_nvidia_entry(entry, gpus)
        if found is None:
            break
        key = found.mig_uuid or found.uuid
        if key in seen:
            return ()  # CUDA: a device listed twice leaves none visible
        seen.add(key)
        if found.mig_uuid is not None:
            if any(v.mig_uuid for v in chosen):
                break  # one MIG instance per process
        chosen.append(found)
    return tuple(chosen)


def _resolve_nvidia_entry(entry: int | str, gpus: Sequence[PhysicalGpu]) -> VisibleGpu | None:
    if isinstance(entry, int):
        if entry >= len(gpus):
            return None
        return VisibleGpu(gpus[entry].index, gpus[entry].uuid)
    if entry.startswith("GPU-"):
        hit = _match_prefix(entry, [gpu.uuid for gpu in gpus])
        return None if hit is None else VisibleGpu(gpus[hit].index, gpus[hit].uuid)
    # "MIG-<uuid>" (and the legacy "MIG-GPU-<uuid>/<gi>/<ci>", matched on its GPU part).
    for gpu in gpus:
        hit = _match_prefix(entry, gpu.mig_uuids)
        if hit is not None:
            return VisibleGpu(gpu.index, gpu.uuid, gpu.mig_uuids[hit])
        legacy = entry.upper().startswith("MIG-GPU-")
        if legacy and gpu.uuid.lower() == entry[4:].split("/")[0].lower():
            return VisibleGpu(gpu.index, gpu.uuid, entry)
    return None


def visible_amd(physical: int, environ: Mapping[str, str]) -> tuple[int | None, ...]:
    """Physical indices (sysfs order) of the GPUs a HIP build of torch will see, in its order.

    A UUID in ``ROCR_VISIBLE_DEVICES`` counts as one device whose physical index is unknown
    (None): the figures of ``device_stats`` then come from torch's allocator alone.
    """
    pool: list[int | None] = list(range(physical))
    rocr = environ.get(ROCR_VAR)
    if rocr is not None:
        pool = _pick(pool, parse_entries(rocr), allow_uuids=True)
    hip = environ.get(HIP_VAR)
    if hip is None:
        hip = environ.get(CUDA_VAR)
    if hip is not None:
        pool = _pick(pool, parse_entries(hip), allow_uuids=False)
    return tuple(pool)


def _pick(
    pool: Sequence[int | None], entries: Sequence[int | str], *, allow_uuids: bool
) -> list[int | None]:
    chosen: list[int | None] = []
    seen: set[int | str] = set()
    for entry in entries:
        if isinstance(entry, str) and not allow_uuids:
            break
        if entry in seen:
            return []
        seen.add(entry)
        if isinstance(entry, str):
            chosen.append(None)
        elif entry < len(pool):
            chosen.append(pool[entry])
        else:
            break
    return chosen

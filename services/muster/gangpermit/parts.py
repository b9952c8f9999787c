"""A permit in parts (docs/events.md, "Permits in parts"): the bindings of a gang too large for
one event, split so that each part's event fits the bus's limit, and the parts' event ids. Pure.

A gang of 100 000 pods binds about 8 MB of pod names, uids and nodes: over the bus's 1 MiB event
limit, a single `gang_permitted` was refused for good and the gang stayed held, never bound.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Final, TypeVar

from google.protobuf.message import Message

M = TypeVar("M", bound=Message)

# Room left in each part for the envelope around the bindings (ids, workload key, trace
# context, the part fields): generous, as a binding is at most ~0.6 KiB.
ENVELOPE_ROOM_BYTES: Final = 4096
# The namespace of parts' event ids. Fixed forever: a pass repeated across an upgrade must
# publish the same ids, so that JetStream drops the copies.
PART_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "permit-parts.muster.dev")


def part_id(permit_id: str, part: int) -> str:
    """The event id of part `part` of the permit whose whole id is `permit_id`."""
    return str(uuid.uuid5(PART_ID_NAMESPACE, f"{permit_id}/{part}"))


def part_ids(permit_id: str, parts: int) -> tuple[str, ...]:
    """Every part's event id; a whole permit (`parts` <= 1) is its own single part."""
    if parts <= 1:
        return (permit_id,)
    return tuple(part_id(permit_id, k) for k in range(parts))


def split_runs(items: Sequence[M], *, max_event_bytes: int) -> list[list[M]]:
    """`items` (a repeated field's) in order, cut into runs whose encoding leaves each part's
    envelope within `max_event_bytes`; one run when they fit whole. A run holds at least one
    item, so a limit smaller than one (a misconfiguration) still makes progress, and the
    publisher says which event is too large."""
    budget = max(max_event_bytes - ENVELOPE_ROOM_BYTES, max_event_bytes // 2)
    runs: list[list[M]] = [[]]
    used = 0
    for item in items:
        size = item.ByteSize()
        size += 1 + _varint_size(size)  # the field's tag and length in the repeated field
        if runs[-1] and used + size > budget:
            runs.append([])
            used = 0
        runs[-1].append(item)
        used += size
    return runs


def _varint_size(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)

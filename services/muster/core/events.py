"""What the engine reports: one `Event` per change to a workload, in the order it happened."""

from __future__ import annotations

from enum import StrEnum

import msgspec


class EventType(StrEnum):
    SUBMITTED = "Submitted"
    PENDING = "Pending"  # emitted when the pending reason or message changes
    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    PREEMPTED = "Preempted"
    EVICTED = "Evicted"
    REQUEUED = "Requeued"
    DEACTIVATED = "Deactivated"
    FINISHED = "Finished"


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One change to one workload. `object` is "<namespace>/<name>"; `by` names the preemptor."""

    time: float
    type: EventType
    object: str
    reason: str = ""
    message: str = ""
    by: str = ""

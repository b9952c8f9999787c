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
    # Routing (issue 6): which of its queues a workload with alternatives takes, and why; once
    # when first decided (`from_queue` == `to_queue` when it stays), then once per move.
    ROUTED = "Routed"
    # Gang placement (issue 4): `object` is the gang (a Kueue workload's key for its pods), or
    # the pod for one placed on its own; PlacementPreempted names the victim, `by` the gang.
    GANG_WAITING = "GangWaiting"  # emitted when the reason changes
    GANG_PERMITTED = "GangPermitted"
    GANG_TIMED_OUT = "GangTimedOut"
    BOUND = "Bound"
    PLACEMENT_PREEMPTED = "PlacementPreempted"


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One change to one workload or gang. `object` is "<namespace>/<name>" (a Workload API gang:
    "<namespace>/<workload>/<podGroup>/<replicaKey>"); `by` names the preemptor."""

    time: float
    type: EventType
    object: str
    reason: str = ""
    message: str = ""
    by: str = ""
    from_queue: str = ""  # Routed: the ClusterQueue it was in
    to_queue: str = ""  # Routed: the ClusterQueue it goes to

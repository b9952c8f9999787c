"""What consumed events mean to admission: the typed facts (`Fact`), the errors of an event that
cannot be read, and the payload fields admission consumes (`WORKLOAD_FACTS`, `RECORDED`). Pure
data: `fact_reader.fact_of` reads them from envelopes, `fact_application` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from muster.api.model import (
    Admission,
    ApiObject,
    ReclaimablePod,
    Workload,
    WorkloadKey,
)

# The eviction reason of a gang that gang-permit rejected (`GangRejected`).
GANG_REJECTED = "GangRejected"


class FactError(ValueError):
    """The event cannot be read (bad manifest): permanent, the message is dead-lettered."""


class ConfigRefusedError(FactError):
    """A configuration event from a cluster that does not own its object (the reason names
    both): dead-lettered, and never applied (`muster.core.config_owners`)."""


class Submit(msgspec.Struct, frozen=True):
    """A workload submitted. A Struct where the other facts are dataclasses: one is made per
    workload on admission's hot path, and a frozen dataclass's __init__ costs ten times as much."""

    workload: Workload
    cluster: str
    generation: int
    at_s: float
    manifest_json: str = ""  # as submitted: copied into its `admitted` (MANIFEST_COPY_LIMIT)
    partition: int | None = None  # the partition it was published in (None: none named)
    owner_manifest_json: str = ""  # the Job it stands for, likewise (MultiKueue copies it)
    event_id: str = ""  # of its `submitted`: what the decisions about it name (`submitted_id`)


@dataclass(frozen=True, slots=True)
class Finish:
    key: WorkloadKey
    at_s: float = 0.0  # its event's time: when its quota was released (0: not known)


@dataclass(frozen=True, slots=True)
class Delete:
    key: WorkloadKey
    at_s: float = 0.0  # likewise


@dataclass(frozen=True, slots=True)
class Stopped:
    """eviction_completed: the evicted workload's pods are gone.

    `eviction_id` names the eviction completed (the `evicted` event's id); "" in events
    written before binders named it, and in admission's own for a lost cluster.
    """

    key: WorkloadKey
    at_s: float
    eviction_id: str = ""


@dataclass(frozen=True, slots=True)
class PodsReady:
    key: WorkloadKey
    lost: bool = False  # readiness told before was lost (docs/events.md, "Readiness lost")
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SetActive:
    """active_changed: spec.active set through the gateway (kueuectl's stop and resume)."""

    key: WorkloadKey
    active: bool


@dataclass(frozen=True, slots=True)
class SetReclaimable:
    """reclaimable_pods: the workload's pods that finished for good, the whole list now."""

    key: WorkloadKey
    pods: tuple[ReclaimablePod, ...]
    at_s: float = 0.0  # its event's time: when the pods were given back (0: not known)


@dataclass(frozen=True, slots=True)
class CheckUpdated:
    key: WorkloadKey
    check: str
    state: str
    message: str
    requeue_after_s: float = 0.0
    # When the check entered its state (its entry's lastTransitionTime, else the event's
    # time): a Retry's requeueAfterSeconds counts from it, as Kueue's GetMaxRetryTime.
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GangRejected:
    key: WorkloadKey
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RequestsRefused:
    """The cluster will not run the admitted workload with the requests it was admitted with
    (a routed Job): evicted, and back on its declared queue for good."""

    key: WorkloadKey
    message: str


@dataclass(frozen=True, slots=True)
class PlacementPreempted:
    """Gang placement needs these workloads' nodes: the Kueue ones among them are evicted here
    (admission owns their quota); gangpermit evicts the others itself."""

    gang: str
    victims: tuple[WorkloadKey, ...]


@dataclass(frozen=True, slots=True)
class ApplyConfig:
    obj: ApiObject
    kind: str
    name: str
    cluster: str


@dataclass(frozen=True, slots=True)
class DeleteConfig:
    kind: str
    name: str
    cluster: str = ""  # whose: a Namespace is deleted from that cluster's only


@dataclass(frozen=True, slots=True)
class Term:
    """A term of shard `shard`'s lease: `number` is the lease's revision when it was acquired
    (revisions of one bucket only grow, so a later term has a larger number); `owner` holds it."""

    shard: int
    number: int
    owner: str = ""

    def __str__(self) -> str:
        return f"term {self.number} of shard {self.shard} ({self.owner})"


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """config.partition: who decides `partition` from this record on (`shard`), a LocalQueue
    that left it, or a new term of its decider (`takeover`); or none of them (a kind this
    version does not know). Admission's decisions about the partition are fenced on `sequence`."""

    partition: int
    sequence: int
    shard: int | None = None
    local_queue: str = ""  # "<namespace>/<name>"
    to_partition: int = 0
    adopted: bool = False
    # What the LocalQueue's retired workloads left in its admission fair sharing usage, as
    # read from `partition`'s history: (at_s, ((resource, amount), ...)); unchecked.
    carried: tuple[float, tuple[tuple[str, float], ...]] | None = None
    takeover: Term | None = None  # takeover.py


@dataclass(frozen=True, slots=True)
class Recorded:
    """A decision an admission replica published: history to rebuild from, never re-decided.

    `kind` is the payload field: pending, quota_reserved, admitted, evicted, requeued or
    routed (`queue_name`: the LocalQueue it was routed to).
    """

    key: WorkloadKey
    kind: str
    source: str
    at_s: float
    event_id: str = ""  # of the decision (an eviction is named by it: `Stopped.eviction_id`)
    submitted_id: str = ""  # the `submitted` it decides about ("": an older writer's)
    reason: str = ""
    message: str = ""
    admission: Admission | None = None
    checks: tuple[str, ...] = ()
    queue_name: str = ""


Fact = (
    Submit
    | Finish
    | Delete
    | Stopped
    | PodsReady
    | SetActive
    | SetReclaimable
    | CheckUpdated
    | GangRejected
    | RequestsRefused
    | PlacementPreempted
    | ApplyConfig
    | DeleteConfig
    | PartitionRecord
    | Recorded
)

# The workload events `fact_of` reads (payload fields, which are also their subjects' last
# token): the facts, then the decisions recorded as history. Admission consumes only these.
WORKLOAD_FACTS = (
    "submitted",
    "finished",
    "deleted",
    "eviction_completed",
    "pods_ready",
    "running",  # with its pods ready (docs/events.md, "Running and ready")
    "admission_check",
    "gang_rejected",
    "requests_refused",
    "placement_preempted",
    "active_changed",
    "reclaimable_pods",
)
RECORDED = ("pending", "quota_reserved", "admitted", "evicted", "requeued", "routed")

"""The engine's mutable record of one workload: where it is in its life and what it holds."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from enum import Enum
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from muster.api.model import Condition, Workload, WorkloadKey
from muster.core.check_retries import NO_RETRIES, retries_after_eviction
from muster.core.flavors import Assignment
from muster.core.quota import FlavorResource
from muster.core.reclaim import NONE, reclaimed_usage

if TYPE_CHECKING:
    from muster.core.queues import OrderKey, PendingGroup


# One empty map shared by every record without admission checks (most of them: 64 bytes each at
# a million pending). Values are only set for checks already in a record's map (engine.py,
# lifecycle.py), so nothing writes to it; a record given checks gets a map of its own.
_NO_CHECKS: Final[dict[str, str]] = {}
_FAILED: Final = frozenset({"Retry", "Rejected"})  # Kueue: HasRetryChecks, HasRejectedChecks
NO_ENDS: Final[Mapping[str, float]] = {}  # shared by every record without a told Retry's end

# Conditions alike are one object, and so are condition maps alike: the workloads waiting in a
# group are all told the same (a map and a condition each were 0.2 KiB per workload at a
# million pending). A record's map is therefore replaced, never changed in place. Either table
# starts over when full, which costs only sharing.
_SHARED_LIMIT: Final = 4096
_K = TypeVar("_K")
_V = TypeVar("_V")
_CONDITIONS: dict[Condition, Condition] = {}
_MAPS: dict[tuple[Condition, ...], Mapping[str, Condition]] = {}
_NO_CONDITIONS: Final[Mapping[str, Condition]] = {}


def _shared(table: dict[_K, _V], key: _K, value: _V) -> _V:
    """The value kept in `table` under `key`, or `value`, kept from now on."""
    known = table.get(key)
    if known is None:
        if len(table) >= _SHARED_LIMIT:
            table.clear()
        known = table[key] = value
    return known


class Phase(Enum):
    PENDING = "Pending"  # queued (or waiting for its queue to exist)
    BACKOFF = "Backoff"  # evicted, waiting out a requeue delay
    RESERVED = "QuotaReserved"  # holds quota, admission checks not all Ready
    ADMITTED = "Admitted"
    EVICTING = "Evicting"  # evicted, still holding quota until its pods stop
    FINISHED = "Finished"
    INACTIVE = "Inactive"  # spec.active false, or deactivated by a check or back-off limit
    DELETED = "Deleted"

    # Members are singletons compared by identity: hashed by identity too, in C, instead of
    # Enum's hash of the name in Python (the decision path asks `phase in <set>` about fifty
    # times per workload).
    __hash__ = object.__hash__


_HOLDING = frozenset({Phase.RESERVED, Phase.ADMITTED, Phase.EVICTING})


class RecordIndex(Protocol):
    """What keeps per-queue views of records (`core.queue_index`): told around every change
    of an attribute the views read."""

    def leave(self, r: WorkloadRecord) -> None: ...

    def enter(self, r: WorkloadRecord) -> None: ...

    def regroup(self, r: WorkloadRecord, group: PendingGroup | None) -> None: ...


class WorkloadRecord:
    __slots__ = (
        "_assignment",
        "_cluster_queue",
        "_group",
        "_index",
        "_local_queue",
        "_phase",
        "_queue_ts",
        "_reclaimable",
        "checks",
        "conditions",
        "created_s",
        "evicted",
        "evicted_by",
        "key",
        "pending_message",
        "pods_ready",
        "pods_ready_deadline_s",
        "priority",
        "queue_token",
        "requeue_at_s",
        "requeue_count",
        "reserved_at_s",
        "resource_problem",
        "retry_counts",
        "retry_ends",
        "seq",
        "shape",
        "told_checks",
        "wl",
    )
    if TYPE_CHECKING:  # `_indexed` properties (below): a change tells the record's index

        @property
        def phase(self) -> Phase: ...
        @phase.setter
        def phase(self, value: Phase) -> None: ...
        @property
        def cluster_queue(self) -> str: ...  # resolved through the LocalQueue
        @cluster_queue.setter
        def cluster_queue(self, value: str) -> None: ...
        @property
        def local_queue(self) -> str: ...
        @local_queue.setter
        def local_queue(self, value: str) -> None: ...
        @property
        def assignment(self) -> Assignment | None: ...
        @assignment.setter
        def assignment(self, value: Assignment | None) -> None: ...
        @property
        def queue_ts(self) -> float:
            """Kueue's queue-order timestamp: creation, or the last eviction by an admission
            check (or by the PodsReady timeout, with requeuingStrategy timestamp Eviction)."""

        @queue_ts.setter
        def queue_ts(self, value: float) -> None: ...
        @property
        def reclaimable(self) -> Mapping[str, int]: ...  # status.reclaimablePods, when gated on
        @reclaimable.setter
        def reclaimable(self, value: Mapping[str, int]) -> None: ...  # `usage` follows
        @property
        def group(self) -> PendingGroup | None: ...  # told to the index while Pending
        @group.setter
        def group(self, value: PendingGroup | None) -> None: ...

    def __init__(
        self, wl: Workload, *, seq: int, priority: int, now_s: float, key: WorkloadKey | None = None
    ) -> None:
        self.wl = wl
        self.key: WorkloadKey = wl.key if key is None else key  # `key`: the caller's copy
        self.seq = seq
        self.priority = priority
        self.created_s = now_s
        self._index: RecordIndex | None = None  # set while the engine's state holds it
        self._queue_ts = now_s
        self._local_queue = local_queue_of(wl.meta.namespace, wl.queue_name)
        self._cluster_queue = ""
        self._phase = Phase.PENDING
        self._assignment: Assignment | None = None
        self.reserved_at_s = 0.0
        # Why its requests may never be admitted in its namespace (core.limit_ranges), or None.
        self.resource_problem: str | None = None
        self.conditions: Mapping[str, Condition] = _NO_CONDITIONS  # shared: set_condition
        self.checks: dict[str, str] = _NO_CHECKS  # replaced, never written, while empty
        # Ready or Pending told since its last eviction while it held no quota: where its next
        # reservation's checks start (`tell_check`); shared and empty, as `checks`, until told.
        self.told_checks: dict[str, str] = _NO_CHECKS
        # Of those told Retry, when each asked it to queue again (lastTransitionTime +
        # requeueAfterSeconds): read at reactivation (`requeue_state.reactivated_retry_end_s`).
        self.retry_ends: Mapping[str, float] = NO_ENDS
        # Kueue's retryCount of each check (`core.check_retries`), counted at its evictions.
        self.retry_counts: Mapping[str, int] = NO_RETRIES
        self.evicted = False
        self.evicted_by: WorkloadKey | None = None  # the preemptor, while being evicted for one
        self._group: PendingGroup | None = None
        self.queue_token = 0
        self.pending_message = ""
        self.pods_ready = False
        self.pods_ready_deadline_s: float | None = None
        self.requeue_at_s: float | None = None
        self.requeue_count = 0
        self.shape = b""
        self._reclaimable = NONE

    @property
    def order_key(self) -> OrderKey:
        return (-self.priority, self.queue_ts, self.seq)

    @property
    def is_queued(self) -> bool:
        return self.phase is Phase.PENDING

    @property
    def is_unreserved(self) -> bool:
        """Queued or backing off: no reservation, and none being given up."""
        return self.phase in (Phase.PENDING, Phase.BACKOFF)

    @property
    def holds_quota(self) -> bool:
        return self.phase in _HOLDING

    @property
    def usage(self) -> Mapping[FlavorResource, int]:
        a = self.assignment
        if a is None:
            return {}
        if not self.reclaimable:
            return a.usage
        return reclaimed_usage(a.pod_sets, self.wl.pod_sets, self.reclaimable)

    def unindexed(self) -> RecordIndex | None:
        """Out of its index, counted as it is now, while several of the attributes the index
        reads change (`reindexed` puts it back): one count out and one in, instead of one of
        each per change. Nothing may read the index in between. None when not indexed."""
        index = self._index
        if index is not None:
            index.leave(self)
            self._index = None
        return index

    def reindexed(self, index: RecordIndex | None) -> None:
        """Back into `index` (from `unindexed`), counted as it is now."""
        if index is not None:
            self._index = index
            index.enter(self)

    def tell_check(self, check: str, state: str, *, retry_end_s: float | None = None) -> None:
        """A check's state told while it holds no quota: Kueue keeps it in the Workload's
        status.admissionChecks; a Ready or Pending is where its next reservation starts, a
        Retry or Rejected keeps it from being reserved (`failed_checks`). A Retry's
        `retry_end_s` counts for as long as the check stays in Retry (GetMaxRetryTime)."""
        self.told_checks = {**self.told_checks, check: state}
        if state == "Retry" and retry_end_s is not None:
            self.retry_ends = {**self.retry_ends, check: retry_end_s}
        elif check in self.retry_ends:
            self.retry_ends = {c: s for c, s in self.retry_ends.items() if c != check} or NO_ENDS

    @property
    def failed_checks(self) -> list[str]:
        """The checks that told Retry or Rejected since its last eviction while it held no
        quota: Kueue's scheduler (nominate) leaves it inadmissible while its ClusterQueue
        names one (`Heads`)."""
        return [check for check, s in self.told_checks.items() if s in _FAILED]

    def take_told_checks(self, checks: Iterable[str]) -> dict[str, str]:
        """The states `checks` start from at a reservation: a Ready or Pending told since the
        last eviction, else Pending; the told ones are spent."""
        told, self.told_checks, self.retry_ends = self.told_checks, _NO_CHECKS, NO_ENDS
        return {
            check: s if (s := told.get(check, "Pending")) not in _FAILED else "Pending"
            for check in checks
        }

    def reset_checks(self) -> None:
        """Kueue's resetChecksOnEviction: every check Pending again at an eviction, a Retry
        (its reservation's, or told since it held none) counting one retry more."""
        states = {**self.told_checks, **self.checks}
        self.retry_counts = retries_after_eviction(self.retry_counts, states)
        self.told_checks, self.retry_ends = _NO_CHECKS, NO_ENDS

    def set_condition(self, type_: str, status: bool, reason: str, message: str) -> None:
        condition = Condition(
            type=type_, status="True" if status else "False", reason=reason, message=message
        )
        condition = _shared(_CONDITIONS, condition, condition)
        if self.conditions.get(type_) is not condition:
            self._set_conditions({**self.conditions, type_: condition})

    def drop_conditions(self, *types: str) -> None:
        if any(t in self.conditions for t in types):
            self._set_conditions({t: c for t, c in self.conditions.items() if t not in types})

    def _set_conditions(self, conditions: dict[str, Condition]) -> None:
        # Each condition names its type: in order, the conditions say all the map does.
        self.conditions = _shared(_MAPS, tuple(conditions.values()), conditions)


def _indexed(slot: str) -> property:
    """An attribute kept in `slot` whose changes the record's index sees: it leaves the index
    as it was and enters it as it is. Read through a C getter: the decision path reads
    `phase` often."""
    get = attrgetter(slot)

    def set_(r: WorkloadRecord, value: Any) -> None:
        index = r._index
        if index is None or get(r) == value:  # an equal value counts the same
            setattr(r, slot, value)
        else:
            index.leave(r)
            setattr(r, slot, value)
            index.enter(r)

    return property(get, set_)


def _set_group(r: WorkloadRecord, group: PendingGroup | None) -> None:
    index = r._index
    if index is not None and r._phase is Phase.PENDING and r._group is not group:
        index.regroup(r, group)
    r._group = group


if not TYPE_CHECKING:
    WorkloadRecord.group = property(attrgetter("_group"), _set_group)
    WorkloadRecord.phase = _indexed("_phase")
    WorkloadRecord.cluster_queue = _indexed("_cluster_queue")
    WorkloadRecord.local_queue = _indexed("_local_queue")
    WorkloadRecord.assignment = _indexed("_assignment")
    WorkloadRecord.queue_ts = _indexed("_queue_ts")
    WorkloadRecord.reclaimable = _indexed("_reclaimable")


def local_queue_of(namespace: str, queue_name: str) -> str:
    """`namespace/queue` of a LocalQueue: one string per queue (interned), not per workload."""
    return sys.intern(f"{namespace}/{queue_name or 'default'}")

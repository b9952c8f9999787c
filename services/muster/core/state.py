"""What the admission engine knows between calls: `EngineState`.

The records of every workload, the cohort trees' and ClusterQueues' runtime queues, timers,
the clock as last told, the events of the call in progress, and the caches the round keeps
(attempts, fair-sharing keys). `queueing` and `lifecycle` change it; `engine` drives them;
views (`visibility`) and routing (`routing.loads`, `routing.router`) only read it.
"""

from __future__ import annotations

import heapq

import msgspec

from muster.api.model import WorkloadKey
from muster.core.admission_fair_sharing import AdmissionUsage
from muster.core.attempt import Attempts
from muster.core.config import Configuration
from muster.core.events import Event, EventType
from muster.core.queue_index import QueueIndex
from muster.core.queues import ListedTrees, QueueRuntime, TreeRuntime
from muster.core.quota import FlavorResource
from muster.core.records import WorkloadRecord
from muster.core.tournament import FairKeys
from muster.core.usage import Usage

# A timer: when it fires, a tie-breaker, what it is ("requeue", "pods-ready"), whose.
Timer = tuple[float, int, str, WorkloadKey]


class EngineState:
    """Records, trees, queues, timers, clock and events of one engine.

    `hold_quota_until_stopped`: when False (the quota-only simulator), an evicted workload
    gives its quota back at once; when True (services), only after its pods are gone.
    `admission_fair_sharing`: whether LocalQueue usage orders the ClusterQueues that ask for it.
    """

    def __init__(
        self,
        config: Configuration,
        *,
        hold_quota_until_stopped: bool,
        admission_fair_sharing: bool = True,
    ) -> None:
        self.config = config
        self.usage = Usage(config)
        # LocalQueues' decayed usage (admission fair sharing), kept across configuration changes
        self.admission_usage = AdmissionUsage() if admission_fair_sharing else None
        self.hold_quota_until_stopped = hold_quota_until_stopped
        # Every workload known, in arrival order (a resubmission after deletion moves to the end).
        self.records: dict[WorkloadKey, WorkloadRecord] = {}
        self.index = QueueIndex()  # per-queue views of `records`, kept as they change
        self.trees: dict[str, TreeRuntime] = {}
        self.listed = ListedTrees()  # the trees the next round walks (Engine.schedule)
        self.queues: dict[str, QueueRuntime] = {}
        self.timers: list[Timer] = []
        self.seq = 0
        self.now_s = 0.0
        self.events: list[Event] = []
        self.emitted = 0  # events ever emitted: says whether anything happened since a look
        self.version = 0  # bumped by every call that may change state; keys cached views
        self.preempted_this_round: set[WorkloadKey] = set()
        # Restored as waiting for its victims: its next try parks it instead of preempting.
        self.awaiting_victims: set[WorkloadKey] = set()
        self.reserving = False  # once a preemptor has held quota (services), reservations count
        # While a preemptor takes what its victims free at once: what they freed, per resource.
        self.deferred: dict[FlavorResource, int] | None = None
        self.attempts = Attempts(
            config, self.usage, self.records, queue_usage=self.queue_usage, clock=self._now
        )
        self.fair_keys = FairKeys(config, self.usage, self.attempts)

    def _now(self) -> float:
        return self.now_s

    def local_queue_usage(self, local_queue: str) -> float:
        """`local_queue`'s usage now as admission fair sharing compares it (0 when off)."""
        book, settings = self.admission_usage, self.config.kueue.admission_fair_sharing
        if book is None or settings is None:
            return 0.0
        lq = self.config.local_queues.get(local_queue)
        weight = lq.fair_sharing_weight if lq is not None else 1.0  # Kueue: missing, 1
        return book.usage(local_queue, now_s=self.now_s, config=settings, queue_weight=weight)

    def queue_usage(self, cq: str, local_queue: str) -> float | None:
        """`local_queue`'s usage now if ClusterQueue `cq` orders by it, else None (what Kueue's
        snapshot gives a workload as LocalQueueFSUsage, for preemption's candidate order)."""
        if self.admission_usage is None or not self.config.usage_based(cq):
            return None
        return self.local_queue_usage(local_queue)

    def emit(
        self,
        type_: EventType,
        r: WorkloadRecord,
        reason: str,
        message: str,
        *,
        by: str = "",
        from_queue: str = "",
        to_queue: str = "",
    ) -> None:
        self.emitted += 1
        self.events.append(
            Event(
                time=self.now_s,
                type=type_,
                object=r.key,
                reason=reason,
                message=message,
                by=by,
                from_queue=from_queue,
                to_queue=to_queue,
            )
        )

    def take_events(self) -> list[Event]:
        """The events of the call that ends; the state has a new version."""
        self.version += 1
        events, self.events = self.events, []
        return events

    def add_timer(self, at: float, kind: str, key: WorkloadKey) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (at, self.seq, kind, key))


def shape_of(r: WorkloadRecord) -> bytes:
    """What BestEffortFIFO groups by: workloads of one shape are decided alike."""
    if r.reclaimable:  # fewer pods asked: another shape
        return msgspec.json.encode((r.local_queue, r.priority, r.wl.pod_sets, r.reclaimable))
    return msgspec.json.encode((r.local_queue, r.priority, r.wl.pod_sets))

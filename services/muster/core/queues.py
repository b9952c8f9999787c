"""Pending workloads, indexed so that a decision costs the same however many are waiting.

A ClusterQueue's pending workloads are split into *groups* that decide alike: same
LocalQueue, priority and podsets (BestEffortFIFO), or one group for the whole queue
(StrictFIFO, where the head blocks the rest; under admission fair sharing a
`FairStrictGroup`). Only a group's head is ever evaluated. A group whose head cannot be
admitted is *parked*: it leaves the queue's active set and is woken only when enough quota is
released in its cohort tree (or the configuration changes).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol

from muster.api.model import WorkloadKey
from muster.core.admission_fair_sharing import fair_key
from muster.core.quota import FlavorResource, QuotaNode

if TYPE_CHECKING:
    from muster.core.flavors import Assignment
    from muster.core.records import WorkloadRecord

OrderKey = tuple[int, float, int]  # (-priority, queue timestamp, arrival sequence)


class Ranking(Protocol):
    """A cohort tree's fair-sharing order (`muster.core.tournament.Tournament`) as its queues
    and the round use it; declared here so that the queues need not know the tournament."""

    def touch(self, cq: QueueRuntime) -> None: ...

    def winner(self, root: QuotaNode) -> tuple[QueueRuntime, WorkloadRecord] | None: ...


class LocalUsage(Protocol):
    """A ClusterQueue's view of its LocalQueues' admission fair sharing usage (built by
    `Queueing`; the numbers are `core.admission_fair_sharing`'s)."""

    def now_s(self) -> float: ...

    def usage(self, local_queue: str) -> float: ...


SET_ASIDE = b"\x00set-aside"  # a StrictFIFO queue's heads that its namespace selector refuses


class Reservation(NamedTuple):
    """What a preemptor will use, held for it while its victims stop."""

    order: tuple[object, ...]  # the preemptor's cycle order: work after it may not take this
    queue_order: OrderKey  # its order within its ClusterQueue
    node: QuotaNode  # the preemptor's ClusterQueue
    usage: Mapping[FlavorResource, int]
    counts: tuple[int, ...] = ()  # the pods per podset it preempted for
    assignment: Assignment | None = None  # the flavors it preempted for


class Park(Enum):
    ACTIVE = 0
    PARKED = 1


class PendingGroup:
    """Workloads of one ClusterQueue that the assigner would treat identically, FIFO."""

    __slots__ = ("cq", "heap", "listed", "local_queue", "park", "shape", "token", "why")

    def __init__(self, cq: QueueRuntime, shape: bytes, local_queue: str = "") -> None:
        self.cq = cq
        self.shape = shape
        self.local_queue = local_queue  # its members' LocalQueue ("": several, StrictFIFO)
        self.heap: list[tuple[OrderKey, int, WorkloadRecord]] = []
        self.park = Park.ACTIVE
        self.token = 0  # bumped whenever the group is parked or re-listed; stale entries skip
        self.listed: OrderKey | None = None  # the key of its valid entry in `cq.active`, if any
        self.why: tuple[str, str] | None = None  # (reason, message) of the last park

    def push(self, r: WorkloadRecord) -> None:
        r.queue_token += 1
        heapq.heappush(self.heap, (r.order_key, r.queue_token, r))

    def head(self) -> WorkloadRecord | None:
        heap = self.heap
        while heap:
            _, token, r = heap[0]
            if r.queue_token == token and r.group is self and r.is_queued:
                return r
            heapq.heappop(heap)
        return None

    def pop_head(self) -> None:
        heapq.heappop(self.heap)


class FairStrictGroup(PendingGroup):
    """A StrictFIFO queue's one group under admission fair sharing: its head is the best of
    its LocalQueues' heads by `fair_key` (usage, then priority and FIFO) at the time asked,
    as Kueue's StrictFIFO heap sorts by the same queueOrderingFunc as a BestEffortFIFO one;
    it blocks the rest as any StrictFIFO head does. A look costs one usage per LocalQueue
    with workloads waiting (each cached by the book for the instant: `QueueUsage.last`)."""

    __slots__ = ("by_local_queue", "fair", "head_local_queue")

    def __init__(self, cq: QueueRuntime, shape: bytes, fair: LocalUsage) -> None:
        super().__init__(cq, shape)
        self.fair = fair
        self.by_local_queue: dict[str, list[tuple[OrderKey, int, WorkloadRecord]]] = {}
        self.head_local_queue = ""  # of the last head given: `pop_head` takes it

    def push(self, r: WorkloadRecord) -> None:
        r.queue_token += 1
        heap = self.by_local_queue.setdefault(r.local_queue, [])
        heapq.heappush(heap, (r.order_key, r.queue_token, r))

    def head(self) -> WorkloadRecord | None:
        best: tuple[tuple[float, OrderKey], str, WorkloadRecord] | None = None
        for name in list(self.by_local_queue):
            heap = self.by_local_queue[name]
            while heap:
                _, token, r = heap[0]
                if r.queue_token == token and r.group is self and r.is_queued:
                    break
                heapq.heappop(heap)
            if not heap:
                del self.by_local_queue[name]
                continue
            r = heap[0][2]
            key = fair_key(self.fair.usage(name), r.order_key)
            if best is None or key < best[0]:
                best = (key, name, r)
        if best is None:
            return None
        self.head_local_queue = best[1]
        return best[2]

    def pop_head(self) -> None:
        heapq.heappop(self.by_local_queue[self.head_local_queue])


GroupEntry = tuple[OrderKey, int, bytes, PendingGroup]


class QueueRuntime:
    """A ClusterQueue's pending side: its groups and the heap of its unparked ones.

    With admission fair sharing (`local_usage`), the unparked groups are kept in one heap per
    LocalQueue, and the LocalQueues in a heap by (usage, best head's key). Usage changes with
    time, so that heap is rebuilt when the clock has moved; at one instant a LocalQueue's usage
    only grows (a start adds its entry penalty) and its best key only grows unless a group is
    listed (which pushes a fresh entry), so every entry is a lower bound of its LocalQueue's
    true key and one that still matches at the top is the least."""

    __slots__ = (
        "active",
        "by_local_queue",
        "groups",
        "listed",
        "local_heap",
        "local_heap_at",
        "local_usage",
        "name",
        "node",
        "token",
        "tree",
    )

    def __init__(
        self,
        name: str,
        tree: TreeRuntime,
        node: QuotaNode,
        local_usage: LocalUsage | None = None,
    ) -> None:
        self.name = name
        self.tree = tree
        self.node = node  # its node in the quota tree
        self.local_usage = local_usage
        self.groups: dict[bytes, PendingGroup] = {}
        # (head's key, token, shape, group): the shape (a group's key in `groups`) settles a tie
        # before the groups are compared (they cannot be): a workload moved to another group of
        # the queue (set aside, routed) leaves its old group listed under its key for a while.
        self.active: list[GroupEntry] = []
        self.by_local_queue: dict[str, list[GroupEntry]] = {}
        self.local_heap: list[tuple[float, OrderKey, str]] = []
        self.local_heap_at: float | None = None  # the time its usages are for (None: unbuilt)
        self.token = 0  # bumped when the queue is (re)listed in its tree's ready heap
        self.listed: tuple[object, ...] | None = None  # the key of its valid `ready` entry

    def list_group(self, group: PendingGroup) -> None:
        """Put `group` among the active ones, keyed by its current head.

        Not again under the key it is listed with: each arrival behind a head re-listed its
        group, and a replica adopting a million workloads before its first round held a
        million stale entries until then (freed, their memory stayed the process's)."""
        head = group.head()
        if head is None:
            # Woken with no one left in it: active, so its next arrival lists it (parked, it
            # was in no parked heap any more, and a workload joining it waited for good).
            group.park = Park.ACTIVE
            return
        key = head.order_key
        if group.listed == key:
            return
        group.park = Park.ACTIVE
        group.token += 1
        group.listed = key
        if self.local_usage is None:
            heapq.heappush(self.active, (key, group.token, group.shape, group))
            return
        heap = self.by_local_queue.setdefault(group.local_queue, [])
        heapq.heappush(heap, (key, group.token, group.shape, group))
        if self.local_heap_at is not None:
            entry = self._local_entry(group.local_queue)
            if entry is not None:
                heapq.heappush(self.local_heap, entry[:3])

    def best_group(self) -> PendingGroup | None:
        fair = self.local_usage
        if fair is None:
            return self._best_in(self.active)
        # Admission fair sharing (rule A3 in core.admission_fair_sharing): the LocalQueue
        # with the least usage first, then priority and FIFO within it.
        now_s = fair.now_s()
        heap = self.local_heap
        if self.local_heap_at != now_s:
            entries = [self._local_entry(name) for name in sorted(self.by_local_queue)]
            heap[:] = [e[:3] for e in entries if e is not None]
            heapq.heapify(heap)
            self.local_heap_at = now_s
        while heap:
            usage, key, name = heap[0]
            entry = self._local_entry(name)
            if entry is None:
                heapq.heappop(heap)
            elif entry[0] == usage and entry[1] == key:
                return entry[3]
            else:
                heapq.heapreplace(heap, entry[:3])
        return None

    def _local_entry(self, name: str) -> tuple[float, OrderKey, str, PendingGroup] | None:
        """LocalQueue `name`'s key now and its best group, or None when it has none active."""
        assert self.local_usage is not None
        groups = self.by_local_queue.get(name)
        group = self._best_in(groups) if groups is not None else None
        if group is None:
            self.by_local_queue.pop(name, None)  # listed again by its next arrival or wake
            return None
        head = group.head()
        assert head is not None
        return *fair_key(self.local_usage.usage(name), head.order_key), name, group

    @staticmethod
    def _best_in(active: list[GroupEntry]) -> PendingGroup | None:
        while active:
            _, token, _, group = active[0]
            if group.token == token and group.park is Park.ACTIVE and group.head() is not None:
                return group
            if group.token == token:
                group.listed = None
            heapq.heappop(active)
        return None


class ListedTrees:
    """The cohort trees with a queue listed since the round last walked them: a round walks
    only these. Without it every replica walked every tree of the configuration each round,
    those it does not own included: a cost per round that does not divide with shards."""

    __slots__ = ("grew", "names")

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.grew = False  # a tree joined while a round walked the others

    def add(self, name: str) -> None:
        if name not in self.names:
            self.names.add(name)
            self.grew = True


class TreeRuntime:
    """A cohort tree's scheduling state: queues ready to be tried, and parked groups."""

    __slots__ = (
        "freed",
        "listed",
        "name",
        "parked",
        "ready",
        "reservations",
        "root",
        "seq",
        "tournament",
    )

    def __init__(
        self,
        name: str,
        root: QuotaNode,
        tournament: Ranking | None = None,
        listed: ListedTrees | None = None,
    ) -> None:
        self.name = name
        self.root = root
        # Where the tree is marked when a queue of it is listed (its tournament marks it too).
        self.listed = listed if listed is not None else ListedTrees()
        # Fair sharing over a cohort tree: the order is a tournament, not `ready`.
        self.tournament = tournament
        # (sort key, token, name, queue): queues whose best group should be tried, best first.
        # The name settles a tie before the queue is compared (it cannot be): a workload moved
        # to another queue of the tree (routing) lists it under the key the queue it left is
        # still listed under, and two queues' tokens (each its own count) can be equal.
        self.ready: list[tuple[tuple[object, ...], int, str, QueueRuntime]] = []
        # Cumulative quota released per (flavor, resource): parked groups wait for it to grow.
        self.freed: dict[FlavorResource, int] = {}
        self.parked: dict[FlavorResource, list[tuple[int, int, int, PendingGroup]]] = {}
        self.seq = 0
        # Preemptors waiting for their victims to stop (services: quota is held until then).
        self.reservations: dict[WorkloadKey, Reservation] = {}

    def hold_for(
        self,
        r: WorkloadRecord,
        order: tuple[object, ...],
        *,
        cq: QuotaNode,
        sticky: bool,
    ) -> list[Reservation]:
        """Count, in the quota tree, what the preemptors that go before head `r` hold: those
        ahead of `order` in the cycle order; in a `sticky` (BestEffortFIFO) ClusterQueue `cq`,
        its preemptors (Kueue keeps a preemptor at the head of such a queue), except for a
        preemptor ahead of them in the queue; and always the one that evicted `r`, so that a
        victim never takes back what it gave up. `unhold` the result once `r` is decided."""
        if not self.reservations:
            return []
        mine = self.reservations.get(r.key)
        ahead = [
            res
            for k, res in sorted(self.reservations.items())
            if k != r.key
            and (
                k == r.evicted_by
                or (
                    (mine is None or res.queue_order < r.order_key)
                    if sticky and res.node is cq
                    else res.order < order
                )
            )
        ]
        for res in ahead:
            for fr, amount in res.usage.items():
                res.node.add_usage(fr, amount)
        return ahead

    @staticmethod
    def unhold(held: list[Reservation]) -> None:
        for res in held:
            for fr, amount in res.usage.items():
                res.node.add_usage(fr, -amount)

    def list_queue(self, cq: QueueRuntime, key: tuple[object, ...]) -> None:
        """List `cq` under `key`, unless it is listed under that key already (as groups)."""
        if cq.listed == key:
            return
        cq.token += 1
        cq.listed = key
        heapq.heappush(self.ready, (key, cq.token, cq.name, cq))
        self.listed.add(self.name)

    def next_queue(self) -> tuple[tuple[object, ...], QueueRuntime] | None:
        while self.ready:
            key, token, _, cq = heapq.heappop(self.ready)
            if cq.token == token:
                cq.listed = None
                return key, cq
        return None

    def peek_key(self) -> tuple[object, ...] | None:
        while self.ready:
            key, token, _, cq = self.ready[0]
            if cq.token == token:
                return key
            heapq.heappop(self.ready)
        return None

    def park(self, group: PendingGroup, shortages: dict[FlavorResource, int]) -> None:
        """Park `group` until `shortages[fr]` more of some fr is released in this tree.

        With no shortages the group waits for a configuration change.
        """
        group.park = Park.PARKED
        group.token += 1
        group.listed = None
        for fr, short in shortages.items():
            self.seq += 1
            threshold = self.freed.get(fr, 0) + max(1, short)
            heapq.heappush(
                self.parked.setdefault(fr, []), (threshold, self.seq, group.token, group)
            )

    def release(self, fr: FlavorResource, amount: int) -> list[PendingGroup]:
        """Record `amount` of `fr` released; return the parked groups this may help."""
        total = self.freed[fr] = self.freed.get(fr, 0) + amount
        heap = self.parked.get(fr)
        woken: list[PendingGroup] = []
        while heap and heap[0][0] <= total:
            _, _, token, group = heapq.heappop(heap)
            if group.token == token and group.park is Park.PARKED:
                woken.append(group)
        return woken

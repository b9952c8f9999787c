"""Visibility.QueueStatus and PendingWorkloads, answered from the MUSTER_VISIBILITY bucket.

Admission writes the bucket (docs/services.md): `cq.<name>` (ClusterQueueStatus),
`lq.<namespace>.<name>` (LocalQueueStatus) and the pending workloads of each ClusterQueue in
order: `pending-index.<cq>` (PendingPageIndex: the pages by priority and FIFO, with their counts
per LocalQueue, its writer's epoch and, under admission fair sharing, each LocalQueue's usage
rank, which orders before the pages: `plan`) and `pending-page.<epoch>-<id>.<cq>`
(PendingWorkloadsResponse, positions left to the reader; `pending-page.<id>.<cq>` under an
index of epoch 0, written before epochs); each a serialized protobuf. A query reads the index
and only the pages holding what it asks for: a LocalQueue's, only the pages its counts say
hold its workloads. The layout before (docs/events.md, issue 19 note: pages of equal size
with positions set, `pending.<cq>` and `pending-from.<start>.<cq>`) is read while a
ClusterQueue has no index, during an upgrade. The gateway only reads, through the small
`VisibilityStore` seam.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple, Protocol, TypeVar

from muster.bus.kv import Bucket
from muster.contracts.v1 import events_pb2, services_pb2

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000

T = TypeVar("T")


class VisibilityStore(Protocol):
    """What the gateway reads from the visibility bucket."""

    async def get(self, key: str) -> bytes | None:
        """The value of `key`, or None when it is absent or deleted."""
        ...

    async def entries(self, pattern: str) -> dict[str, bytes]:
        """Every live key matching NATS subject `pattern` (`cq.>`) with its value."""
        ...


class UnknownQueueError(Exception):
    """The ClusterQueue or LocalQueue asked about does not exist (NOT_FOUND)."""


class InvalidQueryError(Exception):
    """The request itself is wrong (INVALID_ARGUMENT); str() names the field."""


class KeyValueStore:
    """`VisibilityStore` over a key-value bucket (the bus's `Bucket`)."""

    def __init__(self, kv: Bucket) -> None:
        self._kv = kv

    async def get(self, key: str) -> bytes | None:
        entry = await self._kv.get(key)  # None also for a name no queue can have ("a b", "*")
        return None if entry is None else entry.value

    async def entries(self, pattern: str) -> dict[str, bytes]:
        found = await self._kv.snapshot(pattern)
        return {key: entry.value or b"" for key, entry in found.items()}


def page_bounds(offset: int, limit: int) -> tuple[int, int]:
    """Return the (offset, limit) to use, limit 0 meaning 100; InvalidQueryError if out of range."""
    if offset < 0:
        raise InvalidQueryError(f"offset: must be >= 0, got {offset}")
    if limit < 0 or limit > MAX_LIMIT:
        raise InvalidQueryError(f"limit: must be between 0 and {MAX_LIMIT}, got {limit}")
    return offset, limit or DEFAULT_LIMIT


def page(items: Sequence[T], *, offset: int, limit: int) -> list[T]:
    """Return the page of `items` that starts at `offset` and holds at most `limit` items."""
    return list(items[offset : offset + limit])


async def queue_status(
    store: VisibilityStore, *, cluster_queue: str = ""
) -> services_pb2.QueueStatusResponse:
    """Return the status of every ClusterQueue (or of `cluster_queue`) and its LocalQueues.

    Both lists are sorted by name. Raises UnknownQueueError when `cluster_queue` is unknown.
    """
    if cluster_queue:
        data = await store.get(f"cq.{cluster_queue}")
        if data is None:
            raise UnknownQueueError(f'ClusterQueue "{cluster_queue}" not found')
        cluster_queues = [events_pb2.ClusterQueueStatus.FromString(data)]
    else:
        found = await store.entries("cq.>")
        cluster_queues = [events_pb2.ClusterQueueStatus.FromString(v) for v in found.values()]
    local_queues = [
        events_pb2.LocalQueueStatus.FromString(v) for v in (await store.entries("lq.>")).values()
    ]
    if cluster_queue:
        local_queues = [lq for lq in local_queues if lq.cluster_queue == cluster_queue]
    for lq in local_queues:
        lq.ClearField("epoch")  # the writer's fence (admission/visibility_writer.py), not status
    cluster_queues.sort(key=lambda cq: cq.name)
    local_queues.sort(key=lambda lq: (lq.namespace, lq.name))
    return services_pb2.QueueStatusResponse(
        cluster_queues=cluster_queues, local_queues=local_queues
    )


async def pending_workloads(
    store: VisibilityStore, request: services_pb2.PendingWorkloadsRequest
) -> services_pb2.PendingWorkloadsResponse:
    """Return one page of the workloads pending in a ClusterQueue or a LocalQueue, in order.

    `total` counts every match, not only the page. Positions are admission's (0-based, in the
    ClusterQueue and in the LocalQueue). A LocalQueue without namespace is in "default".
    """
    offset, limit = page_bounds(request.offset, request.limit)
    if request.cluster_queue and request.local_queue:
        raise InvalidQueryError("cluster_queue, local_queue: set one, not both")
    if request.cluster_queue:
        cluster_queue = request.cluster_queue
        data = await store.get(f"cq.{cluster_queue}")
        if data is None:
            raise UnknownQueueError(f'ClusterQueue "{cluster_queue}" not found')
        total = events_pb2.ClusterQueueStatus.FromString(data).pending_workloads
        index = await pending_index(store, cluster_queue)
        if index is not None:
            return await _indexed(store, cluster_queue, index, offset, offset + limit)
        found = await _pending(store, cluster_queue, start=offset, stop=offset + limit)
        return services_pb2.PendingWorkloadsResponse(items=found, total=total)
    if request.local_queue:
        namespace = request.namespace or "default"
        data = await store.get(f"lq.{namespace}.{request.local_queue}")
        if data is None:
            raise UnknownQueueError(f'LocalQueue "{namespace}/{request.local_queue}" not found')
        lq = events_pb2.LocalQueueStatus.FromString(data)
        index = await pending_index(store, lq.cluster_queue)
        if index is not None:
            queue = (namespace, request.local_queue)
            return await _indexed(store, lq.cluster_queue, index, offset, offset + limit, queue)
        items = [
            item
            for item in await _pending(store, lq.cluster_queue)
            if item.namespace == namespace and item.local_queue == request.local_queue
        ]
    else:
        raise InvalidQueryError("cluster_queue, local_queue: one of them is required")
    return services_pb2.PendingWorkloadsResponse(
        items=page(items, offset=offset, limit=limit), total=len(items)
    )


LocalQueueKey = tuple[str, str]  # (namespace, name)


class PageSlot(NamedTuple):
    """A page to read: its id; per usage rank of its LocalQueues (`fair_order`; 0 for all
    without admission fair sharing), the ClusterQueue position of its first workload of that
    rank; per LocalQueue in it, how many of that queue's workloads come before it; and the
    index's ranks."""

    id: int
    starts: dict[int, int]
    local_starts: dict[LocalQueueKey, int]
    ranks: Mapping[LocalQueueKey, int]


async def pending_index(
    store: VisibilityStore, cluster_queue: str
) -> services_pb2.PendingPageIndex | None:
    """The index of `cluster_queue`'s pending pages, or None while admission writes the
    layout before it (no index yet)."""
    data = await store.get(f"pending-index.{cluster_queue}")
    return None if data is None else services_pb2.PendingPageIndex.FromString(data)


def plan(
    index: services_pb2.PendingPageIndex,
    start: int,
    stop: int,
    local_queue: LocalQueueKey | None = None,
) -> tuple[list[PageSlot], int]:
    """The pages holding positions `start` to `stop` (of `local_queue`'s workloads when given,
    else of the ClusterQueue's), and how many workloads the positions count.

    The pages are by priority, then FIFO; a ClusterQueue ordered by admission fair sharing
    lists its LocalQueues' usage ranks, and admission's order is by rank, then page order
    (`core.admission_fair_sharing.fair_key`): a workload's position is the count of every
    lower rank's workloads plus that of its own rank's before it."""
    ranks = {(q.namespace, q.name): q.rank for q in index.fair_order}
    pages = [(e, {(q.namespace, q.name): q.count for q in e.local_queues}) for e in index.pages]
    totals: dict[int, int] = {}
    for _, counts in pages:
        for key, n in counts.items():
            totals[ranks.get(key, 0)] = totals.get(ranks.get(key, 0), 0) + n
    next_at, position = {}, 0  # per rank, the position of its next workload
    for rank in sorted(totals):
        next_at[rank], position = position, position + totals[rank]
    slots: list[PageSlot] = []
    before: dict[LocalQueueKey, int] = {}
    for entry, counts in pages:
        by_rank: dict[int, int] = {}
        for key, n in counts.items():
            by_rank[ranks.get(key, 0)] = by_rank.get(ranks.get(key, 0), 0) + n
        if local_queue is None:
            spans = [(next_at[rank], n) for rank, n in by_rank.items()]
        else:
            spans = [(before.get(local_queue, 0), counts.get(local_queue, 0))]
        if any(n and first < stop and start < first + n for first, n in spans):
            starts = {rank: next_at[rank] for rank in by_rank}
            slots.append(PageSlot(entry.id, starts, {k: before.get(k, 0) for k in counts}, ranks))
        for rank, n in by_rank.items():
            next_at[rank] += n
        for key, n in counts.items():
            before[key] = before.get(key, 0) + n
    return slots, sum(totals.values()) if local_queue is None else before.get(local_queue, 0)


async def read_pages(
    store: VisibilityStore,
    cluster_queue: str,
    slots: Sequence[PageSlot],
    start: int = 0,
    stop: int | None = None,
    local_queue: LocalQueueKey | None = None,
    *,
    epoch: int = 0,
) -> list[services_pb2.PendingWorkload]:
    """The workloads of `slots`' pages at positions `start` to `stop` (as in `plan`), with
    their positions; `epoch`: the index's. A page deleted since the index was read is
    skipped: the next read finds the index without it."""
    found = await asyncio.gather(
        *(store.get(page_key(cluster_queue, slot.id, epoch)) for slot in slots)
    )
    items: list[services_pb2.PendingWorkload] = []
    for slot, data in zip(slots, found, strict=True):
        if data is not None:
            items += place(cluster_queue, slot, data, start, stop, local_queue)
    # Under admission fair sharing a later page may hold an earlier position.
    items.sort(key=lambda item: item.position_in_cluster_queue)
    return items


def page_key(cluster_queue: str, page_id: int, epoch: int) -> str:
    """Where page `page_id` of an index of epoch `epoch` is (0: an index written before
    epochs, whose page keys have none)."""
    token = f"{epoch}-{page_id}" if epoch else str(page_id)
    return f"pending-page.{token}.{cluster_queue}"


def place(
    cluster_queue: str,
    slot: PageSlot,
    data: bytes,
    start: int = 0,
    stop: int | None = None,
    local_queue: LocalQueueKey | None = None,
) -> list[services_pb2.PendingWorkload]:
    """The workloads of page `data` at positions `start` to `stop`, their positions set."""
    local, at_rank = dict(slot.local_starts), dict(slot.starts)
    items = []
    for item in services_pb2.PendingWorkloadsResponse.FromString(data).items:
        key = (item.namespace, item.local_queue)
        at = local.get(key, 0)
        local[key] = at + 1
        rank = slot.ranks.get(key, 0)
        position = at_rank.get(rank, 0)
        at_rank[rank] = position + 1
        wanted = position if local_queue is None else at if key == local_queue else -1
        if start <= wanted and (stop is None or wanted < stop):
            item.cluster_queue = cluster_queue
            item.position_in_cluster_queue = position
            item.position_in_local_queue = at
            items.append(item)
    return items


async def _indexed(
    store: VisibilityStore,
    cluster_queue: str,
    index: services_pb2.PendingPageIndex,
    start: int,
    stop: int,
    local_queue: LocalQueueKey | None = None,
) -> services_pb2.PendingWorkloadsResponse:
    slots, total = plan(index, start, stop, local_queue)
    items = await read_pages(
        store, cluster_queue, slots, start, stop, local_queue, epoch=index.epoch
    )
    return services_pb2.PendingWorkloadsResponse(items=items, total=total)


async def _pending(
    store: VisibilityStore, cluster_queue: str, *, start: int = 0, stop: int | None = None
) -> list[services_pb2.PendingWorkload]:
    """Positions `start` to `stop` (to the end when None) of the pending list in the layout
    before indexes, read from the pages that hold them: every page but the last is as long
    as the first."""
    first = await _page(store, f"pending.{cluster_queue}")
    if not first:  # nothing pending
        return []
    size = len(first)
    page = skipped = start - start % size
    items: list[services_pb2.PendingWorkload] = []
    while True:
        found = first if page == 0 else await _page(store, f"pending-from.{page}.{cluster_queue}")
        items += found
        page += size
        if len(found) < size or (stop is not None and page >= stop):
            break
    return items[start - skipped : None if stop is None else stop - skipped]


async def _page(store: VisibilityStore, key: str) -> Sequence[services_pb2.PendingWorkload]:
    data = await store.get(key)
    return () if data is None else services_pb2.PendingWorkloadsResponse.FromString(data).items

"""Visibility.ListWorkloads and DescribeWorkload, from the workload book kept by a follower.

`BookFollower` reads MUSTER_EVENTS from its first event into a `WorkloadBook` and keeps
following it, from the first call that needs the book on (a gateway nobody asks about
workloads reads nothing more than before); a call waits until the book has every event
stored when the call came (so `muster submit` then `muster workloads` shows what was
submitted), at most `catch_up_s`.
Positions of pending workloads come from the visibility bucket (admission's), as
`PendingWorkloads` answers them: the stream and the bucket, no other source.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NoReturn

from muster.api.quantity import shown
from muster.api.wellknown import LOCAL_CLUSTER
from muster.bus.errors import BusError
from muster.bus.subjects import EVENTS_STREAM
from muster.bus.supervision import supervised
from muster.contracts.v1 import services_pb2
from muster.contracts.v1.events_pb2 import Envelope
from muster.gateway.book import FINISHED_RETENTION_S, STATUSES, Entry, WorkloadBook
from muster.gateway.visibility import InvalidQueryError, VisibilityStore, page_key, place, plan
from muster.gateway.watch import ALL_SUBJECTS, EventHistory

log = logging.getLogger(__name__)

CATCH_UP_S: Final = 10.0
RETRY_S: Final = 1.0
# kueuectl's --status values, and the book's statuses they select.
STATUS_FILTERS: Final = {
    "all": frozenset(STATUSES),
    "pending": frozenset({"PENDING", "WAITING"}),
    "quotareserved": frozenset({"QUOTARESERVED"}),
    "admitted": frozenset({"ADMITTED", "PERMITTED"}),
    "finished": frozenset({"FINISHED"}),
    "inactive": frozenset({"INACTIVE"}),
}


class BookUnavailableError(Exception):
    """The book is behind the stream for longer than a call may wait (UNAVAILABLE)."""


async def follow_forever(
    history: EventHistory,
    subjects: Sequence[str],
    start: Callable[[], int],
    apply: Callable[[Envelope], None],
    *,
    what: str,
) -> NoReturn:
    """Apply every event of MUSTER_EVENTS on `subjects` from sequence `start()` on, and keep
    following; after a bus failure, read on from `start()` again."""
    while True:
        try:
            events = history.replay(
                list(subjects), stream=EVENTS_STREAM, from_sequence=start(), follow=True
            )
            async for env in events:
                apply(env)
        except BusError as exc:
            log.warning("%s: reading events failed, retrying: %s", what, exc)
            await asyncio.sleep(RETRY_S)


class BookFollower:
    """Feeds a `WorkloadBook` from the stream until cancelled (`run`); `current` waits."""

    def __init__(
        self,
        history: EventHistory,
        *,
        catch_up_s: float = CATCH_UP_S,
        finished_retention_s: float = FINISHED_RETENTION_S,
        manager: str = LOCAL_CLUSTER,
    ) -> None:
        self.history = history
        self.book = WorkloadBook(finished_retention_s=finished_retention_s, manager=manager)
        self.catch_up_s = catch_up_s
        self._moved = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        """Stop following (the gateway stops)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def run(self) -> None:
        """Follow MUSTER_EVENTS from where the book is; a bus failure is retried."""

        def apply(env: Envelope) -> None:
            self.book.apply(env)
            self._moved.set()

        await follow_forever(
            self.history, ALL_SUBJECTS, lambda: self.book.sequence + 1, apply, what="workload book"
        )

    async def current(self) -> WorkloadBook:
        """The book, once it has every event stored now; BookUnavailableError after
        `catch_up_s`. The first call starts following."""
        if self._task is None:
            self._task = supervised(self.run(), name="gateway-workload-book")
        last = await self.history.last_sequence(EVENTS_STREAM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.catch_up_s
        while self.book.sequence < last:
            self._moved.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BookUnavailableError(
                    f"the gateway has read events up to {self.book.sequence} of {last}; "
                    "try again shortly"
                )
            try:
                async with asyncio.timeout(remaining):
                    await self._moved.wait()
            except TimeoutError:
                continue
        return self.book


def status_filter(statuses: Iterable[str]) -> frozenset[str]:
    """The book statuses `statuses` (kueuectl's names) select; InvalidQueryError naming an
    unknown one. None given: all."""
    wanted: set[str] = set()
    for i, status in enumerate(statuses):
        found = STATUS_FILTERS.get(status.lower())
        if found is None:
            known = ", ".join(STATUS_FILTERS)
            # cut: a hostile status would otherwise come back whole in the error
            raise InvalidQueryError(f"statuses[{i}]: unknown status {shown(status)} ({known})")
        wanted |= found
    return frozenset(wanted) or STATUS_FILTERS["all"]


def matching(book: WorkloadBook, request: services_pb2.ListWorkloadsRequest) -> list[Entry]:
    """The entries `request` asks for, by namespace, then submission time, then key."""
    wanted = status_filter(request.statuses)
    namespace = request.namespace
    local_queue = request.local_queue
    found = book.find(namespace, request.name) if request.name else list(book)
    selected = [
        e
        for e in found
        if e.summary.status in wanted
        and (not namespace or e.summary.namespace == namespace)
        and (not request.cluster_queue or e.summary.cluster_queue == request.cluster_queue)
        and (
            not local_queue
            or (
                e.summary.local_queue == local_queue
                and e.summary.namespace == (namespace or "default")
            )
        )
    ]
    selected.sort(key=lambda e: (e.summary.namespace, e.summary.submitted_unix_nano, e.key))
    return selected


def local_queues(book: WorkloadBook, namespace: str) -> list[str]:
    """The LocalQueues of `namespace` the book knows: configured, or named by a workload."""
    configured = {
        name.partition("/")[2] for kind, name in book.configs if kind == "LocalQueue"
        and name.partition("/")[0] == namespace
    }  # fmt: skip
    named = {e.summary.local_queue for e in book if e.summary.namespace == namespace}
    return sorted((configured | named) - {""})


async def positions(store: VisibilityStore) -> dict[str, services_pb2.PendingWorkload]:
    """Every pending workload's positions, by key, as admission last wrote them: from each
    ClusterQueue's index and pages, or in the layout before indexes (`pending.<cq>`,
    `pending-from.<start>.<cq>`, positions set) for a ClusterQueue without an index."""
    found: dict[str, services_pb2.PendingWorkload] = {}
    indexes = await store.entries("pending-index.>")
    indexed = {key.removeprefix("pending-index.") for key in indexes}
    legacy = {**await store.entries("pending.>"), **await store.entries("pending-from.>")}
    pages = await store.entries("pending-page.>")
    items = [
        item
        for data in legacy.values()
        for item in services_pb2.PendingWorkloadsResponse.FromString(data).items
        if item.cluster_queue not in indexed
    ]
    for cluster_queue in indexed:
        index = services_pb2.PendingPageIndex.FromString(indexes[f"pending-index.{cluster_queue}"])
        for slot in plan(index, 0, sys.maxsize)[0]:
            data = pages.get(page_key(cluster_queue, slot.id, index.epoch))
            if data is not None:
                items += place(cluster_queue, slot, data)
    for item in items:
        found[f"{item.namespace}/{item.name}"] = item
    return found


def summaries(
    entries: Sequence[Entry], pending: dict[str, services_pb2.PendingWorkload]
) -> list[services_pb2.WorkloadSummary]:
    """The entries' summaries, each pending one with its positions."""
    out = []
    for e in entries:
        summary = services_pb2.WorkloadSummary()
        summary.CopyFrom(e.summary)
        item = pending.get(e.key)
        if item is not None and summary.status == "PENDING":
            summary.position_in_local_queue = item.position_in_local_queue
            summary.position_in_cluster_queue = item.position_in_cluster_queue
        out.append(summary)
    return out


def not_found(namespace: str, name: str, retention_s: float = FINISHED_RETENTION_S) -> str:
    """What NOT_FOUND says of a workload name: where to look (a newcomer left out `-n` and
    was told only of namespace default), and why a finished one may be gone."""
    return (
        f'workload "{name}" not found in namespace {namespace} (`-n` names another; '
        f"`muster workloads` lists every namespace's; a finished workload is forgotten "
        f"{retention_s:g}s after it finishes; `muster events` still shows its events)"
    )


def one_named(book: WorkloadBook, namespace: str, name: str) -> Entry:
    """The one workload `name` names in `namespace`; LookupError (NOT_FOUND) when none,
    InvalidQueryError naming the candidates when several."""
    if not name:
        raise InvalidQueryError("name: is required")
    found = book.find(namespace, name)
    if not found:
        raise LookupError(not_found(namespace, name, book.finished_retention_s))
    if len(found) > 1:
        keys = ", ".join(sorted(e.key for e in found))
        raise InvalidQueryError(f'name: "{name}" names several workloads ({keys}): give one')
    return found[0]

"""Events.Watch: envelopes from MUSTER_EVENTS, from a sequence on, filtered for one caller.

`WatchFilter` is the pure part (which envelopes a request wants, which subjects to read);
`watch` reads history and then, unless the request is `history_only`, follows new events
through the `EventHistory` seam (the bus).

A local_queue filter needs to know which workloads are in the LocalQueue: `QueueMembers`
learns it from the events it reads (submitted, routed, finished, deleted). When the watch starts
after them (a resume, or from_sequence 0) it first reads those events before its start: one
pass over part of the stream, done only for local_queue watches.
"""

from __future__ import annotations

import contextlib
import enum
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Final, Protocol

import msgspec

from muster.api.quantity import shown
from muster.bus.subjects import (
    EVENTS_STREAM,
    PAYLOAD_FIELDS,
    PREFIX,
    stream_of,
    workload_filters,
    workload_subject,
)
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.request_names import NAMESPACE, OBJECT_NAME, check_names
from muster.gateway.visibility import InvalidQueryError

# Deprecated request metadata that turns following off, as `WatchRequest.history_only` does;
# honoured for clients built against the contract before that field.
FOLLOW_METADATA: Final = "muster-follow"
ALL_SUBJECTS: Final = (f"{PREFIX}.*.workload.>", f"{PREFIX}.*.queue.>", f"{PREFIX}.*.config.>")
_SUBMITTED: Final = "workload.submitted"
_ROUTED: Final = "workload.routed"
_FINISHED: Final = "workload.finished"
_DELETED: Final = "workload.deleted"
# Admission's copy of an event into another partition (docs/events.md, "Partitions").
FORWARDED: Final = "workload.forwarded"
# The events that say which LocalQueue a workload is in, or that it is gone.
_MEMBERSHIP_TYPES: Final = (_SUBMITTED, _ROUTED, _FINISHED, _DELETED)
DEFAULT_QUEUE: Final = "default"
# Finished workloads a local_queue watch remembers, newest first, so that their `deleted`
# still reaches it. The bound keeps a watch of many days from growing with every workload.
FINISHED_KEPT: Final = 10_000


class EventHistory(Protocol):
    """What Watch reads: ordered history of a stream, and its last sequence (the bus)."""

    def replay(
        self,
        subjects: Sequence[str],
        *,
        stream: str,
        from_sequence: int = 1,
        until_sequence: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[events_pb2.Envelope]: ...

    async def last_sequence(self, stream: str) -> int: ...


class _Via(enum.Enum):
    """How a workload came into the LocalQueue."""

    SUBMITTED = "submitted"  # its declared queue: it stays a member until it is gone
    ROUTED = "routed"  # routed here: a member until it is routed elsewhere


class QueueMembers:
    """The workloads of one LocalQueue, as learnt from the events read in stream order.

    A workload is a member from its `submitted` naming the queue (its declared one), or from a
    `routed` naming the queue on, until it is routed to another queue (a declared member stays),
    and until its `deleted`. Memory: the unfinished members, plus the last FINISHED_KEPT
    finished ones (each kept until its `deleted`, or until that many newer ones finished).
    """

    def __init__(self, local_queue: str, *, finished_kept: int = FINISHED_KEPT) -> None:
        self.local_queue = local_queue
        self.finished_kept = finished_kept
        self.active: dict[str, _Via] = {}
        self.finished: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, workload: str) -> bool:
        return workload in self.active or workload in self.finished

    def __len__(self) -> int:
        return len(self.active) + len(self.finished)

    def observe(self, env: events_pb2.Envelope) -> None:
        """Learn what `env` says about its workload's LocalQueue; call in stream order."""
        key = env.workload
        if env.type == _SUBMITTED:
            self._forget(key)  # a new workload under a key used before
            if (env.submitted.queue_name or DEFAULT_QUEUE) == self.local_queue:
                self.active[key] = _Via.SUBMITTED
        elif env.type == _ROUTED:
            routed_here = (env.routed.queue_name or DEFAULT_QUEUE) == self.local_queue
            if routed_here and key not in self.active:
                self.active[key] = _Via.ROUTED
            elif not routed_here and self.active.get(key) is _Via.ROUTED:
                del self.active[key]
        elif env.type == _FINISHED:
            if self.active.pop(key, None) is not None:
                self.finished[key] = None
                if len(self.finished) > self.finished_kept:
                    self.finished.popitem(last=False)
        elif env.type == _DELETED:
            self._forget(key)

    def _forget(self, key: str) -> None:
        self.active.pop(key, None)
        self.finished.pop(key, None)


class WatchFilter(msgspec.Struct, kw_only=True):
    """Which envelopes one Watch wants; empty fields match everything.

    `members` (only with local_queue) holds the workloads in that LocalQueue, and only those in
    `namespace` and equal to `workload` when these are set.
    """

    namespace: str = ""
    local_queue: str = ""
    workload: str = ""
    types: frozenset[str] = frozenset()
    members: QueueMembers | None = None

    @classmethod
    def from_request(cls, request: services_pb2.WatchRequest) -> WatchFilter:
        """Return the filter `request` asks for; raises InvalidQueryError naming a bad field."""
        namespace, _, name = request.workload.partition("/")
        if request.workload and not (namespace and name):
            raise InvalidQueryError(  # a gang's key has more parts (docs/events.md)
                'workload: must be "<namespace>/<name>" or a gang\'s key, got '
                f"{shown(request.workload)}"
            )
        for t in request.types:
            if t not in PAYLOAD_FIELDS or stream_of(t) != EVENTS_STREAM:
                raise InvalidQueryError(f"types: unknown event type {shown(t)}")
        _check_names(request)
        return cls(
            namespace=request.namespace,
            local_queue=request.local_queue,
            workload=request.workload,
            types=frozenset(request.types),
            members=QueueMembers(request.local_queue) if request.local_queue else None,
        )

    def subjects(self) -> list[str]:
        """Return the subjects to read: as few as the filter allows, server-side."""
        if self.types:
            membership = _MEMBERSHIP_TYPES if self.members is not None else ()
            return _subjects_of({*self.types, *membership})
        if self.namespace or self.workload or self.local_queue:
            return [workload_subject("*", ">")]
        return list(ALL_SUBJECTS)

    def membership_subjects(self) -> list[str]:
        """Return the subjects of the events that say which workloads are in the LocalQueue."""
        return _subjects_of(_MEMBERSHIP_TYPES)

    def observe(self, env: events_pb2.Envelope) -> None:
        """Learn what `env` says about the LocalQueue (when filtering on one)."""
        if self.members is not None and self._tracks(env.workload):
            self.members.observe(env)

    def wants(self, env: events_pb2.Envelope) -> bool:
        """Learn from `env` (`observe`), then return whether the caller wants it.

        An event that moves its workload out of the LocalQueue (routed elsewhere, deleted) is
        still wanted: it is the last one the watch sends about it. A `workload.forwarded`
        (admission's copy of an event into another partition) only when asked for by type.
        """
        was_member = self.members is not None and env.workload in self.members
        self.observe(env)
        if self.types and env.type not in self.types:
            return False
        if not self.types and env.type == FORWARDED:
            return False
        if self.workload and env.workload != self.workload:
            return False
        if self.namespace and not self._in_namespace(env.workload):
            return False
        return self.members is None or was_member or env.workload in self.members

    def _tracks(self, workload: str) -> bool:
        if self.workload and workload != self.workload:
            return False
        return self._in_namespace(workload)

    def _in_namespace(self, workload: str) -> bool:
        return not self.namespace or workload.startswith(f"{self.namespace}/")


def _check_names(request: services_pb2.WatchRequest) -> None:
    """InvalidQueryError for a filter no object can match (it would follow nothing, forever):
    a namespace that is not a DNS-1123 label, a LocalQueue or workload name part that is not a
    DNS-1123 subdomain."""
    namespace, _, rest = request.workload.partition("/")
    check_names(
        [
            ("namespace", request.namespace, NAMESPACE),
            ("local_queue", request.local_queue, OBJECT_NAME),
            ("workload", namespace, NAMESPACE),
            *[("workload", part, OBJECT_NAME) for part in rest.split("/")],
        ]
    )


def _subjects_of(types: Iterable[str]) -> list[str]:
    """The filters of `types`: a workload event's with and without its partition token."""
    return [
        subject
        for t in sorted(types)
        for subject in (
            workload_filters("*", t.removeprefix("workload."))
            if t.startswith("workload.")
            else (f"{PREFIX}.*.{t}",)
        )
    ]


async def watch(
    history: EventHistory, request: services_pb2.WatchRequest
) -> AsyncIterator[events_pb2.Envelope]:
    """Yield the envelopes `request` wants, oldest first, each with `sequence` set.

    from_sequence 0 starts after the last stored event. It waits for new events until the caller
    stops iterating (a cancelled RPC); with `request.history_only` it stops after the last event
    stored when called. Raises InvalidQueryError for a bad request before yielding anything.
    """
    wanted = WatchFilter.from_request(request)
    last = await history.last_sequence(EVENTS_STREAM)
    start = request.from_sequence or last + 1
    if wanted.members is not None and start > 1:
        past = history.replay(
            wanted.membership_subjects(),
            stream=EVENTS_STREAM,
            from_sequence=1,
            until_sequence=start - 1,
        )
        async with _closing(past):
            async for env in past:
                wanted.observe(env)
    follow = not request.history_only
    events = history.replay(
        wanted.subjects(),
        stream=EVENTS_STREAM,
        from_sequence=start,
        until_sequence=None if follow else last,
        follow=follow,
    )
    async with _closing(events):
        async for env in events:
            if wanted.wants(env):
                yield env


@contextlib.asynccontextmanager
async def _closing(iterator: AsyncIterator[events_pb2.Envelope]) -> AsyncIterator[None]:
    """Close `iterator` (an async generator: the bus's reader) however the loop over it ends.

    Ending a Watch must delete its consumer now, not when the generator is garbage collected.
    """
    try:
        yield
    finally:
        aclose: Callable[[], Awaitable[None]] | None = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()

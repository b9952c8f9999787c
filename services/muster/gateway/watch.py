"""Events.Watch: envelopes from MUSTER_EVENTS, from a sequence on, filtered for one caller.

`WatchFilter` is the pure part (which envelopes a request wants, which subjects to read);
`watch` reads history and then follows new events through the `EventHistory` seam (the bus).

The local_queue filter needs each workload's LocalQueue, which only `workload.submitted` says.
The filter learns it from the submitted events it reads; when the watch starts after them (a
resume, or from_sequence 0) it first reads the submitted events before its start. That read
costs one pass over the stream's submitted events, so it is done only for local_queue watches.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final, Protocol

import msgspec

from muster.bus.subjects import EVENTS_STREAM, PAYLOAD_FIELDS, PREFIX, stream_of, workload_subject
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.visibility import InvalidQueryError

# Request metadata that turns following off: the stream ends at the last event stored when the
# call started. `muster events` without --follow sends it.
FOLLOW_METADATA: Final = "muster-follow"
_ALL_SUBJECTS: Final = (f"{PREFIX}.*.workload.>", f"{PREFIX}.*.queue.>", f"{PREFIX}.*.config.>")
_SUBMITTED: Final = "workload.submitted"
_DELETED: Final = "workload.deleted"
DEFAULT_QUEUE: Final = "default"


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


class WatchFilter(msgspec.Struct, kw_only=True):
    """Which envelopes one Watch wants; empty fields match everything.

    `queues` maps a workload key to its LocalQueue, learnt from submitted events (only kept
    when filtering on local_queue, and only for workloads in `namespace` when that is set).
    """

    namespace: str = ""
    local_queue: str = ""
    workload: str = ""
    types: frozenset[str] = frozenset()
    queues: dict[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def from_request(cls, request: services_pb2.WatchRequest) -> WatchFilter:
        """Return the filter `request` asks for; raises InvalidQueryError naming a bad field."""
        namespace, _, name = request.workload.partition("/")
        if request.workload and not (namespace and name):
            raise InvalidQueryError(  # a gang's key has more parts (docs/events.md)
                f'workload: must be "<namespace>/<name>" or a gang\'s key, got "{request.workload}"'
            )
        for t in request.types:
            if t not in PAYLOAD_FIELDS or stream_of(t) != EVENTS_STREAM:
                raise InvalidQueryError(f'types: unknown event type "{t}"')
        return cls(
            namespace=request.namespace,
            local_queue=request.local_queue,
            workload=request.workload,
            types=frozenset(request.types),
        )

    @property
    def needs_queues(self) -> bool:
        """Whether matching needs each workload's LocalQueue (from its submitted event)."""
        return bool(self.local_queue)

    def subjects(self) -> list[str]:
        """Return the subjects to read: as few as the filter allows, server-side."""
        if self.types:
            wanted = set(self.types) | ({_SUBMITTED} if self.needs_queues else set())
            return [f"{PREFIX}.*.{t}" for t in sorted(wanted)]
        if self.namespace or self.workload or self.local_queue:
            return [workload_subject("*", ">")]
        return list(_ALL_SUBJECTS)

    def observe(self, env: events_pb2.Envelope) -> None:
        """Learn (or forget) the LocalQueue of `env`'s workload."""
        if not self.needs_queues or not self._in_namespace(env.workload):
            return
        if env.type == _SUBMITTED:
            self.queues[env.workload] = env.submitted.queue_name or DEFAULT_QUEUE
        elif env.type == _DELETED:
            self.queues.pop(env.workload, None)

    def matches(self, env: events_pb2.Envelope) -> bool:
        """Whether the caller wants `env`. Call `observe(env)` first."""
        if self.types and env.type not in self.types:
            return False
        if self.workload and env.workload != self.workload:
            return False
        if self.namespace and not self._in_namespace(env.workload):
            return False
        return not self.local_queue or self.queues.get(env.workload) == self.local_queue

    def _in_namespace(self, workload: str) -> bool:
        return not self.namespace or workload.startswith(f"{self.namespace}/")


async def watch(
    history: EventHistory, request: services_pb2.WatchRequest, *, follow: bool = True
) -> AsyncIterator[events_pb2.Envelope]:
    """Yield the envelopes `request` wants, oldest first, each with `sequence` set.

    from_sequence 0 starts after the last stored event. With `follow` it waits for new events
    until the caller stops iterating (a cancelled RPC); without, it stops at the last event
    stored when called. Raises InvalidQueryError for a bad request before yielding anything.
    """
    wanted = WatchFilter.from_request(request)
    start = request.from_sequence or await history.last_sequence(EVENTS_STREAM) + 1
    if wanted.needs_queues and start > 1:
        past = history.replay(
            [workload_subject("*", "submitted")],
            stream=EVENTS_STREAM,
            from_sequence=1,
            until_sequence=start - 1,
        )
        async with _closing(past):
            async for env in past:
                wanted.observe(env)
    events = history.replay(
        wanted.subjects(), stream=EVENTS_STREAM, from_sequence=start, follow=follow
    )
    async with _closing(events):
        async for env in events:
            wanted.observe(env)
            if wanted.matches(env):
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

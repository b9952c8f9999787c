"""The muster.v1.Events service: Events.Watch, each call reading the bus (`watch`) in a task
of its own, what the caller may see only, ended with a resumable UNAVAILABLE at shutdown.

A watch follows new events unless the request sets `history_only` (or, deprecated, the call
carries metadata `muster-follow: false`): then the stream ends at the last event stored when
the call started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final, NoReturn

import grpc
import grpc.aio

from muster.bus.errors import BusError
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.gateway.aborts import abort as _abort
from muster.gateway.aborts import answer as _answer
from muster.gateway.aborts import deny as _deny
from muster.gateway.auth import current_caller
from muster.gateway.permissions import (
    ALL_NAMESPACES,
    Authorizer,
    Caller,
    event_action,
    watch_action,
)
from muster.gateway.permissions_kube import AuthorizationUnavailableError
from muster.gateway.visibility import InvalidQueryError
from muster.gateway.watch import FOLLOW_METADATA, EventHistory, WatchFilter, watch
from muster.gateway.watch_slots import WatchLimitError, WatchSlots

log = logging.getLogger(__name__)


class _ShuttingDown:
    """Put in a Watch's queue when the gateway stops."""


_SHUTDOWN: Final = _ShuttingDown()
_WATCH_BUFFER: Final = 64  # envelopes read ahead of a slow Watch client


class EventsServicer(services_pb2_grpc.EventsServicer):
    """Events.Watch: each call reads the bus in its own task, through a bounded queue.

    The reader task is what shutdown cancels; the RPC then ends with UNAVAILABLE and a message
    that says how to resume, instead of hanging until the server's grace period is over.

    A watch of one namespace (or workload) needs `watch` there, else PERMISSION_DENIED; a
    watch of all shows a caller who may not watch every namespace only the events of the
    namespaces they may (asked per event: a revoked permission applies to a running watch).
    """

    def __init__(self, history: EventHistory, authorizer: Authorizer, *, max_calls: int) -> None:
        self._history = history
        self._authorizer = authorizer
        self._readers: set[asyncio.Task[None]] = set()
        self._slots = WatchSlots(max_calls)

    async def Watch(  # noqa: N802  # the RPC's name
        self, request: services_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[events_pb2.Envelope]:
        if _metadata_value(context.invocation_metadata(), FOLLOW_METADATA) == "false":
            # Deprecated: a client built before WatchRequest.history_only says it this way.
            request = _with_history_only(request)
        try:  # a bad filter is no secret: checked before the caller is authorized
            WatchFilter.from_request(request)
        except InvalidQueryError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        caller = current_caller()
        filtered = await self._needs_filter(caller, request, context)
        try:
            self._slots.take(caller.user)
        except WatchLimitError as exc:
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        queue: asyncio.Queue[events_pb2.Envelope | BaseException | _ShuttingDown | None]
        queue = asyncio.Queue(maxsize=_WATCH_BUFFER)
        reader = asyncio.create_task(self._read(request, queue, caller if filtered else None))
        self._readers.add(reader)
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, events_pb2.Envelope):
                    yield item
                else:
                    await _abort_watch(context, item)
        finally:
            self._slots.give(caller.user)
            self._readers.discard(reader)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _needs_filter(
        self,
        caller: Caller,
        request: services_pb2.WatchRequest,
        context: grpc.aio.ServicerContext,
    ) -> bool:
        """Whether each event must be checked; PERMISSION_DENIED for a namespace the caller
        may not watch (the request's own filter then keeps to that namespace)."""
        namespace = request.namespace or request.workload.partition("/")[0]
        if namespace:
            action = watch_action(namespace, request.local_queue)
            if not await _answer(self._authorizer.allowed(caller, action), context):
                await _deny(context, caller, action)
            return False
        everything = watch_action(ALL_NAMESPACES)
        return not await _answer(self._authorizer.allowed(caller, everything), context)

    async def _read(
        self,
        request: services_pb2.WatchRequest,
        queue: asyncio.Queue[events_pb2.Envelope | BaseException | _ShuttingDown | None],
        caller: Caller | None,
    ) -> None:
        """Put what the watch yields in `queue`; with `caller`, only what they may see."""
        try:
            async for env in watch(self._history, request):
                if caller is not None and not await self._authorizer.allowed(
                    caller, event_action(env)
                ):
                    continue
                await queue.put(env)
            await queue.put(None)
        except asyncio.CancelledError:
            # Ended by shutdown (or by the RPC itself, which then no longer reads the queue).
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(_SHUTDOWN)
            raise
        except Exception as exc:  # handed to the RPC, which reports it to the client
            await queue.put(exc)

    def end_watches(self) -> None:
        """End every Watch in progress (at shutdown: a following stream never ends by itself)."""
        for reader in list(self._readers):
            reader.cancel()


def _with_history_only(request: services_pb2.WatchRequest) -> services_pb2.WatchRequest:
    """Return a copy of `request` with `history_only` set (the caller's stays as it was)."""
    copy = services_pb2.WatchRequest()
    copy.CopyFrom(request)
    copy.history_only = True
    return copy


async def _abort_watch(
    context: grpc.aio.ServicerContext, reason: BaseException | _ShuttingDown
) -> NoReturn:
    if isinstance(reason, _ShuttingDown):
        message = "the gateway is shutting down; watch again from the last sequence + 1"
        await _abort(context, grpc.StatusCode.UNAVAILABLE, message)
    if isinstance(reason, InvalidQueryError):
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(reason))
    if isinstance(reason, BusError | AuthorizationUnavailableError):
        await _abort(context, grpc.StatusCode.UNAVAILABLE, f"reading events: {reason}")
    log.error("watch failed", exc_info=reason)
    await _abort(context, grpc.StatusCode.INTERNAL, f"reading events failed: {reason!r}")


def _metadata_value(metadata: Iterable[tuple[str, Any]] | None, key: str) -> str | None:
    for name, value in metadata or ():
        if name.lower() == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None

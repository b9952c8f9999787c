"""The gateway's gRPC server: Gateway.Submit, Visibility, Events.Watch and grpc.health.v1.

`GatewayServer` wires the servicers to the bus (publish, replay, the visibility bucket), the
authentication interceptor (`auth`), the authorizer (`permissions`), TLS and the health
service; `run_gateway` is the body `run_service` runs. Every call is authorized: each object
of a Submit (PERMISSION_DENIED names the permission, the object and the namespace), the
namespaces a Watch shows, the queues a visibility answer lists. What a Submit publishes
carries the caller as its `submitter`, so the binder writes into the cluster as them.

Events.Watch follows new events unless the request sets `history_only` (or, deprecated, the
call carries metadata `muster-follow: false`): then the stream ends at the last event stored
when the call started.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn, Protocol, TypeVar, cast

import grpc
import grpc.aio
import msgspec
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from opentelemetry import trace

from muster.api import VALIDATIONS, FieldError, Validation
from muster.api.quantity import shown
from muster.bus.buckets import CLUSTERS_BUCKET, VISIBILITY_BUCKET
from muster.bus.connection import Bus
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.errors import BusError, Reject
from muster.bus.kv import Bucket
from muster.bus.partitions import QueuePartitions
from muster.bus.progress import Tracker, Wording
from muster.bus.subjects import DEFAULT_CLUSTER, EVENTS_STREAM, check_cluster
from muster.bus.supervision import supervised
from muster.bus.tracing import continue_trace, trace_metadata
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES
from muster.gateway.aborts import abort as _abort
from muster.gateway.aborts import answer as _answer
from muster.gateway.aborts import deny as _deny
from muster.gateway.auth import current_caller
from muster.gateway.auth_config import Security, SecurityConfig, open_reviews, open_security
from muster.gateway.book import FINISHED_RETENTION_S
from muster.gateway.known import KnownFollower
from muster.gateway.kube_submit import SubmitRefusedError, Written, write_objects
from muster.gateway.kube_visibility_server import VisibilityServing
from muster.gateway.loop_server import LoopServer
from muster.gateway.permissions import (
    ALL_NAMESPACES,
    Action,
    Authorizer,
    Caller,
    Permission,
    denials,
    event_action,
    submit_actions,
    watch_action,
)
from muster.gateway.permissions_kube import AuthorizationUnavailableError
from muster.gateway.request_names import NAMESPACE, OBJECT_NAME, Check
from muster.gateway.submit import (
    InvalidManifestError,
    PlannedEvent,
    envelopes,
    oversized,
    plan_submit,
)
from muster.gateway.visibility import (
    InvalidQueryError,
    KeyValueStore,
    UnknownQueueError,
    VisibilityStore,
    pending_workloads,
    queue_status,
)
from muster.gateway.watch import FOLLOW_METADATA, EventHistory, WatchFilter, watch
from muster.gateway.watch_slots import WatchLimitError, WatchSlots
from muster.gateway.watched import warn_if_unwatched
from muster.gateway.workload_rpcs import ClustersBucket, ControlRpcs, WorkloadRpcs, checked_names
from muster.gateway.workloads import BookFollower

if TYPE_CHECKING:
    from muster.cluster.kube.backend import KubeBackend

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_LISTEN: Final = "127.0.0.1:50051"
DEFAULT_MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
DEFAULT_MAX_CALLS: Final = 256  # a Watch holds a thread of its own while it follows
# Manifests up to this size are planned on the event loop: handing them to a thread costs more
# than parsing them (a one-Workload manifest takes about 0.2 ms with libyaml).
INLINE_MANIFEST_BYTES: Final = 16 * 1024
SUBMITS: Final = "gateway-submit"  # the watchdog's name for the Submits in hand
# "Submits gateway-submit stalled: 1 Submit waiting, ... (call 7 in hand)"
SUBMIT_CALLS: Final = Wording("Submits", "Submit", "call", "answer again")
PARTITIONS_LOAD_S: Final = 2.0  # at start, how long to wait for the LocalQueues' partitions
SERVICE_NAMES: Final = tuple(
    d.full_name for d in services_pb2.DESCRIPTOR.services_by_name.values()
)  # muster.v1.Gateway, muster.v1.Visibility, muster.v1.Events


class GatewayConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The gateway's own settings (the common ones are in the bus's ServiceConfig)."""

    listen: str = DEFAULT_LISTEN  # HOST:PORT; port 0 picks a free one
    security: SecurityConfig = SecurityConfig()  # none: loopback only, everyone an admin
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # larger requests: RESOURCE_EXHAUSTED
    cluster: str = DEFAULT_CLUSTER  # Submit's cluster when the request names none
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES  # the bus's limit on one envelope
    grace_s: float = 10.0  # how long unary calls in flight may take at shutdown
    # Calls in flight at once (a following Watch counted); past them a call is refused with
    # RESOURCE_EXHAUSTED (loop_server). Watches take at most half of them (watch_slots).
    max_calls: int = DEFAULT_MAX_CALLS
    # How long the workload book keeps a finished workload (book.py, "Memory")
    finished_retention_s: float = FINISHED_RETENTION_S
    # "kube": Submit writes into the API server of `security.kube` as the caller (kube_submit)
    cluster_backend: Literal["sim", "kube"] = "sim"
    # Kueue's visibility API for the API server's aggregation layer (kube_visibility_server)
    visibility: VisibilityServing | None = None
    # A worker's heartbeat larger than this (head and parts) is shown Refused (cluster_cache)
    heartbeat_max_bytes: int = HEARTBEAT_MAX_BYTES

    def __post_init__(self) -> None:
        host, _ = split_listen(self.listen)
        check_cluster(self.cluster)
        if self.cluster_backend not in ("sim", "kube"):
            raise ValueError(f"cluster backend must be sim or kube, got {self.cluster_backend!r}")
        if self.visibility is not None:
            split_listen(self.visibility.listen)
        if self.max_calls < 1:
            raise ValueError(f"max calls must be >= 1, got {self.max_calls}")
        if not self.finished_retention_s >= 0:  # NaN too
            raise ValueError(
                f"finished retention must be >= 0 seconds, got {self.finished_retention_s:g}"
            )
        if self.max_request_bytes < 1:
            raise ValueError(f"max request bytes must be >= 1, got {self.max_request_bytes}")
        self.security.check_listen(host)


class GatewayBus(EventHistory, Protocol):
    """What the gateway needs from `muster.bus.Bus`."""

    async def stored_subjects(self, pattern: str, stream: str = EVENTS_STREAM) -> list[str]: ...

    async def publish_all(self, envs: Iterable[events_pb2.Envelope]) -> list[int]: ...

    async def publish(self, env: events_pb2.Envelope, *, dedupe_id: str | None = None) -> int: ...

    async def kv(self, bucket: str, *, ttl_s: float | None = None) -> Bucket: ...


class HealthStatus(Protocol):
    """The service runtime's health (`muster.bus.service.Health`)."""

    servicer: HealthServicer

    def ready(self) -> None: ...


def split_listen(listen: str) -> tuple[str, int]:
    """Return (host, port) of "HOST:PORT" ("[::1]:0" too); ValueError when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f'listen address must be HOST:PORT, got "{listen}"')
    return host, int(port)


class GatewayServicer(ControlRpcs, services_pb2_grpc.GatewayServicer):
    """Gateway.Submit: published on NATS, or, with `kube` (the cluster backend is Kubernetes),
    written into the API server as the caller (`kube_submit`); Stop, Resume and Delete
    (`workload_rpcs.ControlRpcs`)."""

    def __init__(
        self,
        bus: GatewayBus,
        config: GatewayConfig,
        authorizer: Authorizer,
        follower: BookFollower,
        *,
        kube: KubeBackend | None = None,
        partitions: QueuePartitions | None = None,
        known: KnownFollower | None = None,
        submits: Tracker | None = None,
    ) -> None:
        self._bus = bus
        self._gateway_bus = bus  # as the Submit path sees it (`_bus` is typed for ControlRpcs)
        self._config = config
        self._authorizer = authorizer
        self._follower = follower
        self._kube = kube
        # What admission would ignore as a duplicate: answered "already exists", not published.
        self._known = known or KnownFollower(bus)
        # Each LocalQueue's admission partition, for the subjects of what Submit publishes.
        self._partitions = partitions or QueuePartitions()
        self._submits = submits  # each Submit in hand, for the watchdog (bus/progress.py)
        self._calls = itertools.count(1)

    async def Submit(  # noqa: N802  # the RPC's name
        self, request: services_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.SubmitResponse:
        if self._submits is None:
            return await self._submit(request, context)
        call = next(self._calls)
        self._submits.began(call)
        try:
            with self._submits.handling(call):  # a Kubernetes write retrying advances it
                return await self._submit(request, context)
        finally:
            self._submits.ended(call)

    async def _submit(
        self, request: services_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.SubmitResponse:
        cluster = request.cluster or self._config.cluster
        try:
            check_cluster(cluster)
        except ValueError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"cluster: {exc}")
        with continue_trace(
            trace_metadata(context.invocation_metadata()),
            "gateway.Submit",
            kind=trace.SpanKind.SERVER,
            new_trace=True,
        ):
            validation = request.validation or "strict"
            if validation not in VALIDATIONS:
                choices = ", ".join(VALIDATIONS)
                problem = f"validation: must be one of {choices}, got {shown(validation)}"
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, problem)
            warnings: list[FieldError] = []
            plan = functools.partial(
                plan_submit,
                request.manifest,
                cluster=cluster,
                submission=request.idempotency_key,
                validation=cast(Validation, validation),
                warnings=warnings,
            )
            try:
                if len(request.manifest) <= INLINE_MANIFEST_BYTES:  # a fraction of a millisecond
                    planned = plan()
                else:  # parsing a large manifest takes a while: keep the loop serving meanwhile
                    planned = await asyncio.to_thread(plan)
            except InvalidManifestError as exc:
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, exc.message)
            except (ValueError, OverflowError, RecursionError) as exc:
                # Planning reads nothing but the manifest: whatever it cannot take is the
                # client's mistake (a number out of an int32's range, ...), never UNKNOWN.
                message = f"manifest: {exc}"
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, message)
            caller = current_caller()
            await self._authorize(caller, planned, cluster=cluster, context=context)
            if self._kube is not None:
                written = await self._write(planned, caller, validation, cluster, context)
                return services_pb2.SubmitResponse(
                    objects=[
                        services_pb2.SubmittedObject(kind=w.kind, key=w.key, outcome=w.outcome)
                        for w in written
                    ],
                    warnings=[str(w) for w in warnings]
                    + [f"{w.kind}/{w.key}: already exists; left as it is"
                       for w in written if w.outcome == "exists"],
                )  # fmt: skip
            for p in planned:  # from the authenticated caller, never from the request
                p.payload.submitter.CopyFrom(caller.submitter())
            exists = {p.event_id for p in await self._known.duplicates(planned)}
            published = [p for p in planned if p.event_id not in exists]
            envs = envelopes(published, cluster=cluster, partition_of=self._partitions.of)
            too_large = oversized(envs, max_event_bytes=self._config.max_event_bytes)
            if too_large:
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "\n".join(too_large))
            lost = await self._store_submit(envs, context)
            exists |= lost
            self._known.published([p for p in published if p.event_id not in lost])
        log.debug("%s submitted %d objects to %s", caller.user, len(published), cluster)
        return submit_response(planned, exists, warnings)

    async def _write(
        self,
        planned: Sequence[PlannedEvent],
        caller: Caller,
        validation: str,
        cluster: str,
        context: grpc.aio.ServicerContext,
    ) -> list[Written]:
        """Write `planned` into the API server as `caller`; the gRPC error the refusal asks."""
        assert self._kube is not None
        if cluster != self._config.cluster:
            message = (
                f"cluster: this gateway writes into the API server of cluster "
                f"{self._config.cluster} only, got {cluster!r}"
            )
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, message)
        try:
            return await write_objects(
                self._kube, planned, caller=caller, validation=cast(Validation, validation)
            )
        except SubmitRefusedError as err:
            log.info("submit refused by the API server for %s: %s", caller.user, err)
            await _abort(context, getattr(grpc.StatusCode, err.code), str(err))

    async def _authorize(
        self,
        caller: Caller,
        planned: Sequence[PlannedEvent],
        *,
        cluster: str,
        context: grpc.aio.ServicerContext,
    ) -> None:
        """PERMISSION_DENIED, one line per object `caller` may not submit, unless all may be."""
        actions = submit_actions(planned, cluster=cluster, default_cluster=self._config.cluster)
        denied = await _answer(denials(self._authorizer, caller, actions), context)
        if denied:
            log.info("%s was denied %d of %d objects", caller.user, len(denied), len(actions))
            await _abort(context, grpc.StatusCode.PERMISSION_DENIED, "\n".join(denied))

    async def _store_submit(
        self, envs: Sequence[events_pb2.Envelope], context: grpc.aio.ServicerContext
    ) -> set[str]:
        """Store a Submit's `envs`; the event ids of the workloads whose name another Submit
        took meanwhile (`KnownFollower.publish`)."""
        try:
            return await self._known.publish(self._gateway_bus, envs)
        except Reject as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except BusError as exc:
            log.warning("submit: publishing failed: %s", exc)
            message = f"{exc}; retry the Submit: events already stored are deduplicated"
            await _abort(context, grpc.StatusCode.UNAVAILABLE, message)


def submit_response(
    planned: Sequence[PlannedEvent], exists: set[str], warnings: Sequence[FieldError]
) -> services_pb2.SubmitResponse:
    """What a Submit on the NATS path answers: each object's event, or "exists" for those
    not published (`exists`: their event ids) with the warning the Kubernetes path gives."""
    objects = [
        services_pb2.SubmittedObject(kind=p.kind, key=p.key, outcome="exists")
        if p.event_id in exists
        else services_pb2.SubmittedObject(kind=p.kind, key=p.key, event_id=p.event_id)
        for p in planned
    ]
    return services_pb2.SubmitResponse(
        objects=objects,
        warnings=[str(w) for w in warnings]
        + [
            f"{p.kind}/{p.key}: already exists; left as it is"
            for p in planned
            if p.event_id in exists
        ],
    )


class VisibilityServicer(WorkloadRpcs, services_pb2_grpc.VisibilityServicer):
    """Queue status and pending workloads, as far as the caller may read them.

    As with Kueue's visibility API, ClusterQueues (their status, their pending workloads) are
    for callers who may watch every namespace; a LocalQueue is for those who may watch its
    namespace (or that LocalQueue). QueueStatus leaves out what the caller may not see.
    """

    def __init__(
        self,
        store: VisibilityStore,
        authorizer: Authorizer,
        follower: BookFollower,
        clusters: ClustersBucket,
        *,
        heartbeat_max_bytes: int = HEARTBEAT_MAX_BYTES,
    ) -> None:
        self._store = store
        self._authorizer = authorizer
        self._follower = follower
        self._clusters = clusters
        self._heartbeat_max_bytes = heartbeat_max_bytes

    async def QueueStatus(  # noqa: N802  # the RPC's name
        self, request: services_pb2.QueueStatusRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.QueueStatusResponse:
        await checked_names(
            lambda: [("cluster_queue", request.cluster_queue, OBJECT_NAME)], context
        )
        caller = current_caller()
        everything = await self._may(caller, watch_action(ALL_NAMESPACES), context)
        if request.cluster_queue and not everything:
            await _deny(context, caller, _cluster_queue_action(request.cluster_queue))
        try:
            found = await queue_status(self._store, cluster_queue=request.cluster_queue)
        except UnknownQueueError as exc:
            await _abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        if everything:
            return found
        visible = [
            lq
            for lq in found.local_queues
            if await self._may(caller, watch_action(lq.namespace, lq.name), context)
        ]
        return services_pb2.QueueStatusResponse(local_queues=visible)

    async def PendingWorkloads(  # noqa: N802  # the RPC's name
        self, request: services_pb2.PendingWorkloadsRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.PendingWorkloadsResponse:
        await checked_names(lambda: _pending_names(request), context)
        caller = current_caller()
        if request.cluster_queue:
            action = _cluster_queue_action(request.cluster_queue)
        else:
            action = watch_action(request.namespace or "default", request.local_queue)
        if (request.cluster_queue or request.local_queue) and not await self._may(
            caller, action, context
        ):
            await _deny(context, caller, action)
        try:
            return await pending_workloads(self._store, request)
        except UnknownQueueError as exc:
            await _abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except InvalidQueryError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    async def _may(self, caller: Caller, action: Action, context: grpc.aio.ServicerContext) -> bool:
        return await _answer(self._authorizer.allowed(caller, action), context)


def _pending_names(request: services_pb2.PendingWorkloadsRequest) -> list[Check]:
    return [
        ("cluster_queue", request.cluster_queue, OBJECT_NAME),
        ("namespace", request.namespace, NAMESPACE),
        ("local_queue", request.local_queue, OBJECT_NAME),
    ]


def _cluster_queue_action(name: str) -> Action:
    """Reading one ClusterQueue: what watching every namespace allows."""
    return Action(
        permission=Permission.WATCH, namespace=ALL_NAMESPACES, kind="ClusterQueue", name=name
    )


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


class GatewayServer:
    """The gateway's gRPC server over one bus connection; `start`, then `stop`."""

    def __init__(
        self,
        bus: GatewayBus,
        config: GatewayConfig,
        *,
        health: HealthServicer | None = None,
        submits: Tracker | None = None,
    ) -> None:
        self._bus = bus
        self._submits = submits
        self.config = config
        self.health = health or HealthServicer()
        self._events: EventsServicer | None = None
        self._server: LoopServer | None = None
        self._exits = contextlib.AsyncExitStack()
        self._kube: KubeBackend | None = None
        self.visibility_address = ""  # Kueue's visibility API, when served
        self.security: Security | None = None
        self.address = ""
        # The workload book (ListWorkloads, DescribeWorkload, Stop, ...): read from the stream
        # from its first event on, from the first call that needs it until `stop`.
        self.follower = BookFollower(
            bus, finished_retention_s=config.finished_retention_s, manager=config.cluster
        )
        self.known = KnownFollower(bus)  # Submit's duplicates, from the first Submit on
        self._clusters: Bucket | None = None  # MUSTER_CLUSTERS, opened when first asked
        self.partitions = QueuePartitions()

    async def start(self) -> str:
        """Listen, report SERVING for every service; return the address ("HOST:PORT").

        Raises ValueError for a bad security file, ClusterError when a kube mode finds no
        API server configuration, OSError when it cannot listen.
        """
        store = KeyValueStore(await self._bus.kv(VISIBILITY_BUCKET))
        if self.config.cluster_backend == "sim":  # Submit publishes workloads: their partitions
            await self._follow_partitions()
        try:
            security = await self._exits.enter_async_context(open_security(self.config.security))
            if self.config.cluster_backend == "kube":
                self._kube = await self._open_kube()
            if self.config.visibility is not None:
                self.visibility_address = await self._serve_visibility(
                    store, self.config.visibility
                )
            address = await self._serve(store, security)
        except BaseException:
            await self._exits.aclose()
            raise
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        await warn_if_unwatched(self._bus, self.config.cluster)
        self.security = security
        self.address = address
        return address

    async def _follow_partitions(self) -> None:
        """Follow the LocalQueues' partitions for the server's lifetime; wait a little for what
        is stored (a workload published in its stand-in partition is forwarded, only slower)."""
        follow = supervised(self.partitions.follow(self._bus.kv), name="gateway-partitions")

        async def stop() -> None:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow

        self._exits.push_async_callback(stop)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.partitions.loaded.wait(), PARTITIONS_LOAD_S)

    async def _open_kube(self) -> KubeBackend:
        """The API server Submit writes into, for the server's lifetime."""
        from muster.cluster.kube.backend import KubeBackend  # the client: on Kubernetes only

        backend = await KubeBackend.connect(self.config.security.kube)
        self._exits.push_async_callback(backend.close)
        return backend

    async def _serve_visibility(self, store: VisibilityStore, serving: VisibilityServing) -> str:
        """Kueue's visibility API over HTTPS, for the server's lifetime; its address."""
        from muster.gateway.kube_visibility_server import VisibilityServer, front_proxy_of

        reviews = await open_reviews(self.config.security.kube)
        self._exits.push_async_callback(reviews.close)
        proxy = await front_proxy_of(serving, reviews)
        server = VisibilityServer(store, reviews, serving=serving, front_proxy=proxy)
        address = await server.start()
        self._exits.push_async_callback(server.stop)
        return address

    async def _serve(self, store: VisibilityStore, security: Security) -> str:
        server = LoopServer(
            asyncio.get_running_loop(),
            security.authentication,
            max_calls=self.config.max_calls,
            options=[
                ("grpc.max_receive_message_length", self.config.max_request_bytes),
                # BDP probing grows each stream's flow-control window to megabytes, which a
                # refused call's unread body then fills: 128 unauthenticated 4 MiB calls cost
                # 40 MiB kept after, against 2 MiB without (`muster bench gateway`).
                ("grpc.http2.bdp_probe", 0),
            ],
        )
        authorizer = security.authorizer
        self._events = EventsServicer(self._bus, authorizer, max_calls=self.config.max_calls)
        services_pb2_grpc.add_GatewayServicer_to_server(
            GatewayServicer(
                self._bus,
                self.config,
                authorizer,
                self.follower,
                kube=self._kube,
                partitions=self.partitions,
                known=self.known,
                submits=self._submits,
            ),
            server,
        )
        services_pb2_grpc.add_VisibilityServicer_to_server(
            VisibilityServicer(
                store,
                authorizer,
                self.follower,
                self._clusters_bucket,
                heartbeat_max_bytes=self.config.heartbeat_max_bytes,
            ),
            server,
        )
        services_pb2_grpc.add_EventsServicer_to_server(self._events, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        host, port = split_listen(self.config.listen)
        try:
            if security.credentials is not None:
                bound = server.add_secure_port(f"{host}:{port}", security.credentials)
            else:
                bound = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:  # grpcio raises when it cannot bind
            raise OSError(f"cannot listen on {self.config.listen}: {exc}") from exc
        if bound == 0:
            raise OSError(f"cannot listen on {self.config.listen}")
        server.start()
        self._server = server
        return f"{host}:{bound}"

    async def _clusters_bucket(self) -> Bucket:
        if self._clusters is None:
            self._clusters = await self._bus.kv(CLUSTERS_BUCKET)
        return self._clusters

    async def stop(self) -> None:
        """Report NOT_SERVING, end the watches, let unary calls finish within the grace period."""
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            if self._events is not None:
                self._events.end_watches()
            await self._server.stop(grace=self.config.grace_s)
            self._server = None
        await self.follower.stop()
        await self.known.stop()
        await self._exits.aclose()


def track_submits(bus: Bus) -> Tracker:
    """The watchdog's tracker of the Submits in hand (bus/progress.py), worded as calls."""
    return bus.progress.track(
        SUBMITS, stream=EVENTS_STREAM, consumer="", max_ack_pending=0, wording=SUBMIT_CALLS
    )


async def run_gateway(bus: Bus, health: HealthStatus, config: GatewayConfig) -> None:
    """Serve the gateway until cancelled; prints "gateway: HOST:PORT" once listening. Each
    Submit is in the watchdog's hands while it runs (a claim or a publish that hangs)."""
    submits = track_submits(bus)
    server = GatewayServer(bus, config, health=health.servicer, submits=submits)
    address = await server.start()
    health.ready()
    print(f"gateway: {address}", flush=True)
    if server.visibility_address:
        print(f"visibility: {server.visibility_address}", flush=True)
    log.info("gateway listening on %s", address)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def _metadata_value(metadata: Iterable[tuple[str, Any]] | None, key: str) -> str | None:
    for name, value in metadata or ():
        if name.lower() == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None

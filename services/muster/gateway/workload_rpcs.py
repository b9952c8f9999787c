"""The gateway's RPCs about single workloads and queues: kueuectl's verbs and listings.

`ControlRpcs` (Gateway.Stop, Resume, Delete) and `WorkloadRpcs` (Visibility.ListWorkloads,
DescribeWorkload) are mixed into the servicers of `service`; both read the `BookFollower`'s
book. Every call is authorized: listing and describing need `watch` in the workload's
namespace (a list leaves out what the caller may not see); stopping, resuming and deleting a
workload need `cancel` there, a LocalQueue `create_queue`, a ClusterQueue `admin`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

import grpc
import grpc.aio

from muster.bus.errors import BusError, Reject
from muster.bus.kv import Bucket
from muster.cluster.kube.backend import KubeBackend
from muster.contracts.v1 import events_pb2, services_pb2
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES
from muster.gateway.aborts import abort, answer, deny
from muster.gateway.auth import current_caller
from muster.gateway.book import Entry, WorkloadBook
from muster.gateway.cluster_cache import ClusterRooms
from muster.gateway.clusters import AnswerTooLargeError, ClusterNotFoundError, clusters_view
from muster.gateway.control import (
    DELETE,
    HOLD,
    HOLD_AND_DRAIN,
    LOCAL_QUEUE,
    NONE,
    RESUME,
    STOP,
    WORKLOAD,
    Plan,
    check_ref,
    kind_of,
    plan_queue,
    plan_workload,
    queue_action,
    workload_action,
)
from muster.gateway.kube_control import control_queue, control_workload
from muster.gateway.kube_submit import SubmitRefusedError
from muster.gateway.node_pages import node_query
from muster.gateway.permissions import (
    ALL_NAMESPACES,
    Action,
    Authorizer,
    Caller,
    Permission,
    watch_action,
)
from muster.gateway.request_names import (
    CLUSTER_ID,
    NAMESPACE,
    OBJECT_NAME,
    Check,
    check_names,
    workload_name,
)
from muster.gateway.visibility import InvalidQueryError, VisibilityStore
from muster.gateway.workloads import (
    BookFollower,
    BookUnavailableError,
    local_queues,
    matching,
    one_named,
    positions,
    summaries,
)

log = logging.getLogger(__name__)


ClustersBucket = Callable[[], Awaitable[Bucket]]  # MUSTER_CLUSTERS, opened when first asked


class _Publisher(Protocol):
    async def publish_all(self, envs: Iterable[events_pb2.Envelope]) -> list[int]: ...


async def _book(follower: BookFollower, context: grpc.aio.ServicerContext) -> WorkloadBook:
    try:
        return await follower.current()
    except BookUnavailableError as exc:
        await abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))


async def _workload(
    book: WorkloadBook, namespace: str, name: str, context: grpc.aio.ServicerContext
) -> Entry:
    try:
        return one_named(book, namespace, name)
    except LookupError as exc:
        await abort(context, grpc.StatusCode.NOT_FOUND, str(exc.args[0]))
    except InvalidQueryError as exc:
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))


async def checked_names(
    checks: Callable[[], Iterable[Check]], context: grpc.aio.ServicerContext
) -> None:
    """Return when every name `checks` gives is one an object can have; else answer
    INVALID_ARGUMENT naming the field, before anything is authorized or looked up (whether
    a name is valid is no secret)."""
    try:
        check_names(checks())
    except InvalidQueryError as exc:
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))


async def _may(
    authorizer: Authorizer, caller: Caller, action: Action, context: grpc.aio.ServicerContext
) -> bool:
    return await answer(authorizer.allowed(caller, action), context)


class _MayWatch:
    """Whether `caller` may watch a namespace (or one LocalQueue of it), each question asked
    once per call (a listing of 10 000 workloads of one LocalQueue asks two)."""

    def __init__(
        self, authorizer: Authorizer, caller: Caller, context: grpc.aio.ServicerContext
    ) -> None:
        self._authorizer, self._caller, self._context = authorizer, caller, context
        self._known: dict[tuple[str, str], bool] = {}

    async def __call__(self, namespace: str, local_queue: str = "") -> bool:
        key = (namespace, local_queue)
        if key not in self._known:
            action = watch_action(namespace, local_queue)
            self._known[key] = await _may(self._authorizer, self._caller, action, self._context)
        return self._known[key]


class ControlRpcs:
    """Gateway.Stop, Resume and Delete (kueuectl's verbs): published on NATS, or, with `_kube`
    (the cluster backend is Kubernetes), written into the API server as the caller
    (`kube_control`)."""

    _authorizer: Authorizer
    _follower: BookFollower
    _bus: _Publisher
    _kube: KubeBackend | None

    async def Stop(  # noqa: N802  # the RPC's name
        self, request: services_pb2.StopRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.ControlResponse:
        policy = HOLD if request.keep_already_running else HOLD_AND_DRAIN
        return await self._control(STOP, request.object, policy, request.idempotency_key, context)

    async def Resume(  # noqa: N802  # the RPC's name
        self, request: services_pb2.ResumeRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.ControlResponse:
        return await self._control(RESUME, request.object, NONE, request.idempotency_key, context)

    async def Delete(  # noqa: N802  # the RPC's name
        self, request: services_pb2.DeleteRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.ControlResponse:
        return await self._control(DELETE, request.object, "", request.idempotency_key, context)

    async def _control(
        self,
        verb: str,
        ref: services_pb2.ObjectRef,
        policy: str,
        idempotency_key: str,
        context: grpc.aio.ServicerContext,
    ) -> services_pb2.ControlResponse:
        try:
            kind = kind_of(ref.kind)
            if verb == DELETE and kind != WORKLOAD:
                raise InvalidQueryError(f"object.kind: only workloads are deleted, got {kind}")
            check_ref(kind, ref)
        except InvalidQueryError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        caller = current_caller()
        book = await _book(self._follower, context)
        entry = None
        if kind == WORKLOAD:
            entry = await self._workload_entry(book, ref, caller, context)
            plan = plan_workload(entry, verb, caller, idempotency_key=idempotency_key)
        else:
            plan = await self._queue_plan(
                book, (verb, kind, policy), ref, caller, idempotency_key, context
            )
        if self._kube is None or not plan.events:
            await self._publish(plan.events, context)
            event_ids = [e.event_id for e in plan.events]
        else:  # the watcher publishes what the API server then holds
            await self._write_control(
                self._kube, (verb, kind, policy), plan.key, entry, caller, context
            )
            event_ids = []
        log.info("%s: %s %s/%s: %s", caller.user, verb, kind, plan.key, plan.message)
        return services_pb2.ControlResponse(
            kind=kind, key=plan.key, event_ids=event_ids, message=plan.message
        )

    @staticmethod
    async def _write_control(
        kube: KubeBackend,
        what: tuple[str, str, str],
        key: str,
        entry: Entry | None,
        caller: Caller,
        context: grpc.aio.ServicerContext,
    ) -> None:
        """`what` (verb, kind, stopPolicy to set) done in the API server as `caller`."""
        verb, kind, policy = what
        try:
            if entry is not None:
                await control_workload(kube, entry, verb, caller)
            else:
                await control_queue(kube, kind, key, verb, policy, caller)
        except SubmitRefusedError as err:
            log.info("%s %s/%s refused by the API server: %s", verb, kind, key, err)
            await abort(context, getattr(grpc.StatusCode, err.code), str(err))

    async def _workload_entry(
        self,
        book: WorkloadBook,
        ref: services_pb2.ObjectRef,
        caller: Caller,
        context: grpc.aio.ServicerContext,
    ) -> Entry:
        """The Kueue workload `ref` names, once `caller` may stop, resume or delete it."""
        namespace = ref.namespace or "default"
        blind = Action(
            permission=Permission.CANCEL,
            namespace=namespace,
            kind=WORKLOAD,
            name=f"{namespace}/{ref.name}",
        )
        # Who may read the namespace, or act on all of it, may learn what is there.
        if not await _may(
            self._authorizer, caller, watch_action(namespace), context
        ) and not await _may(self._authorizer, caller, blind, context):
            return await self._blind_entry(book, blind, ref.name, caller, context)
        entry = await _workload(book, namespace, ref.name, context)
        if not entry.kueue:
            message = f"{entry.key} is a gang outside Kueue: delete its pods or pod group instead"
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, message)
        action = workload_action(entry)
        if not await _may(self._authorizer, caller, action, context):
            await deny(context, caller, action)
        return entry

    async def _blind_entry(
        self,
        book: WorkloadBook,
        blind: Action,
        name: str,
        caller: Caller,
        context: grpc.aio.ServicerContext,
    ) -> Entry:
        """For a caller who may not read `blind`'s namespace: the workload if they may act on
        it, else `blind` denied whether it exists or not (NOT_FOUND, "a gang" or its LocalQueue
        would tell them what they may not read), as Kubernetes answers 403 before it looks."""
        try:
            entry: Entry | None = one_named(book, blind.namespace, name)
        except (LookupError, InvalidQueryError):
            entry = None
        if (
            entry is not None
            and entry.kueue
            and await _may(self._authorizer, caller, workload_action(entry), context)
        ):
            return entry
        await deny(context, caller, blind)

    async def _queue_plan(
        self,
        book: WorkloadBook,
        what: tuple[str, str, str],
        ref: services_pb2.ObjectRef,
        caller: Caller,
        idempotency_key: str,
        context: grpc.aio.ServicerContext,
    ) -> Plan:
        """`what`: (verb, kind, stopPolicy to set)."""
        verb, kind, policy = what
        key = f"{ref.namespace or 'default'}/{ref.name}" if kind == LOCAL_QUEUE else ref.name
        action = queue_action(kind, key)
        if not await _may(self._authorizer, caller, action, context):
            await deny(context, caller, action)
        applied = book.config(kind, key)
        if applied is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, f'{kind} "{key}" not found')
        try:
            return plan_queue(
                kind,
                key,
                applied,
                policy=policy,
                caller=caller,
                verb=verb,
                idempotency_key=idempotency_key,
            )
        except (ValueError, KeyError) as exc:  # a manifest muster wrote itself: a bug
            await abort(context, grpc.StatusCode.INTERNAL, f"{kind} {key}: {exc}")

    async def _publish(
        self, envs: Sequence[events_pb2.Envelope], context: grpc.aio.ServicerContext
    ) -> None:
        if not envs:
            return
        try:
            await self._bus.publish_all(envs)
        except Reject as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except BusError as exc:
            message = f"{exc}; retry: events already stored are deduplicated"
            await abort(context, grpc.StatusCode.UNAVAILABLE, message)


class WorkloadRpcs:
    """Visibility.ListWorkloads, DescribeWorkload and Clusters."""

    _authorizer: Authorizer
    _follower: BookFollower
    _store: VisibilityStore
    _clusters: ClustersBucket
    _heartbeat_max_bytes: int = HEARTBEAT_MAX_BYTES

    @functools.cached_property
    def _cluster_rooms(self) -> ClusterRooms:
        """What the last Clusters call decoded, for the next (one per servicer)."""
        return ClusterRooms(max_bytes=self._heartbeat_max_bytes)

    async def Clusters(  # noqa: N802  # the RPC's name
        self, request: services_pb2.ClustersRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.ClustersResponse:
        await checked_names(lambda: [("cluster", request.cluster, CLUSTER_ID)], context)
        caller = current_caller()
        action = watch_action(ALL_NAMESPACES)  # nodes are the cluster's, in no namespace
        if not await _may(self._authorizer, caller, action, context):
            await deny(context, caller, action)
        try:
            query = node_query(request)
        except InvalidQueryError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        book = await _book(self._follower, context)
        try:
            reported = await self._cluster_rooms.read(await self._clusters())
        except BusError as exc:
            await abort(context, grpc.StatusCode.UNAVAILABLE, f"reading heartbeats: {exc}")
        try:
            return clusters_view(reported, book, query)
        except ClusterNotFoundError as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except AnswerTooLargeError as exc:
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

    async def ListWorkloads(  # noqa: N802  # the RPC's name
        self, request: services_pb2.ListWorkloadsRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.ListWorkloadsResponse:
        await checked_names(lambda: _list_names(request), context)
        caller = current_caller()
        may = _MayWatch(self._authorizer, caller, context)
        namespace, local_queue = request.namespace, request.local_queue
        if namespace and local_queue and not await may(namespace, local_queue):
            await deny(context, caller, watch_action(namespace, local_queue))
        book = await _book(self._follower, context)
        try:
            entries = matching(book, request)
        except InvalidQueryError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # Who may read one LocalQueue sees that queue's workloads, as QueueStatus shows it;
        # who may read no queue of the namespace is denied the namespace.
        if namespace and not local_queue and not await may(namespace):
            queues = local_queues(book, namespace)
            if not [q for q in queues if await may(namespace, q)]:
                await deny(context, caller, watch_action(namespace))
        visible = [
            e
            for e in entries
            if await may(e.summary.namespace)
            or await may(e.summary.namespace, e.summary.local_queue)
        ]
        pending = await positions(self._store)
        return services_pb2.ListWorkloadsResponse(
            items=summaries(visible, pending), sequence=book.sequence
        )

    async def DescribeWorkload(  # noqa: N802  # the RPC's name
        self, request: services_pb2.DescribeWorkloadRequest, context: grpc.aio.ServicerContext
    ) -> services_pb2.WorkloadDescription:
        await checked_names(
            lambda: [
                ("namespace", request.namespace, NAMESPACE),
                *workload_name("name", request.name),
            ],
            context,
        )
        caller = current_caller()
        namespace = request.namespace or "default"
        may = _MayWatch(self._authorizer, caller, context)
        book = await _book(self._follower, context)
        if await may(namespace):
            entry = await _workload(book, namespace, request.name, context)
        else:  # one of a LocalQueue the caller may read; else denied, there or not
            try:
                entry = one_named(book, namespace, request.name)
            except (LookupError, InvalidQueryError):
                await deny(context, caller, watch_action(namespace))
            if not await may(namespace, entry.summary.local_queue):
                await deny(context, caller, watch_action(namespace))
        description = entry.describe()
        (summary,) = summaries([entry], await positions(self._store))
        description.summary.CopyFrom(summary)
        return description


def _list_names(request: services_pb2.ListWorkloadsRequest) -> list[Check]:
    return [
        ("namespace", request.namespace, NAMESPACE),
        ("local_queue", request.local_queue, OBJECT_NAME),
        ("cluster_queue", request.cluster_queue, OBJECT_NAME),
        *workload_name("name", request.name),
    ]

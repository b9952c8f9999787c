"""The muster.v1.Visibility service: queue status and pending workloads from the visibility
bucket (`visibility`), as far as the caller may read them; the workload book's RPCs come from
`workload_rpcs.WorkloadRpcs`."""

from __future__ import annotations

import grpc
import grpc.aio

from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES
from muster.gateway.aborts import abort as _abort
from muster.gateway.aborts import answer as _answer
from muster.gateway.aborts import deny as _deny
from muster.gateway.auth import current_caller
from muster.gateway.permissions import (
    ALL_NAMESPACES,
    Action,
    Authorizer,
    Caller,
    Permission,
    watch_action,
)
from muster.gateway.request_names import NAMESPACE, OBJECT_NAME, Check
from muster.gateway.visibility import (
    InvalidQueryError,
    UnknownQueueError,
    VisibilityStore,
    pending_workloads,
    queue_status,
)
from muster.gateway.workload_rpcs import ClustersBucket, WorkloadRpcs, checked_names
from muster.gateway.workloads import BookFollower


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

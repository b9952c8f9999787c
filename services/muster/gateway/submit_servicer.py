"""Gateway.Submit, the servicer of the muster.v1.Gateway service: a manifest planned
(`submit.plan_submit`), authorized object by object, then published on NATS with its
duplicates answered "exists" (`known`), or written into the API server as the caller
(`kube_submit`). Stop, Resume and Delete come from `workload_rpcs.ControlRpcs`."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, Protocol, cast

import grpc
import grpc.aio
from opentelemetry import trace

from muster.api import VALIDATIONS, FieldError, Validation
from muster.api.quantity import shown
from muster.bus.errors import BusError, Reject
from muster.bus.partitions import QueuePartitions
from muster.bus.progress import Tracker
from muster.bus.subjects import EVENTS_STREAM, check_cluster
from muster.bus.tracing import continue_trace, trace_metadata
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.gateway.aborts import abort as _abort
from muster.gateway.aborts import answer as _answer
from muster.gateway.auth import current_caller
from muster.gateway.claims import ClaimsClashError
from muster.gateway.config import GatewayConfig
from muster.gateway.known import KnownBus, KnownFollower, SubmitPublisher
from muster.gateway.kube_submit import SubmitRefusedError, Written, write_objects
from muster.gateway.permissions import Authorizer, Caller, denials, submit_actions
from muster.gateway.submit import (
    InvalidManifestError,
    PlannedEvent,
    envelopes,
    oversized,
    plan_submit,
)
from muster.gateway.workload_rpcs import ControlRpcs
from muster.gateway.workloads import BookFollower

if TYPE_CHECKING:
    from muster.cluster.kube.backend import KubeBackend

log = logging.getLogger(__name__)

# Manifests up to this size are planned on the event loop: handing them to a thread costs more
# than parsing them (a one-Workload manifest takes about 0.2 ms with libyaml).
INLINE_MANIFEST_BYTES: Final = 16 * 1024


class GatewayBus(KnownBus, SubmitPublisher, Protocol):
    """What the gateway needs from `muster.bus.Bus` (Submit's claims and writes: `known`)."""

    async def stored_subjects(self, pattern: str, stream: str = EVENTS_STREAM) -> list[str]: ...

    async def publish_all(self, envs: Iterable[events_pb2.Envelope]) -> list[int]: ...


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
        except ClaimsClashError as exc:  # a gateway of a --name-claims mode not to run beside
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
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

"""The binder's handlers: start an admitted workload's pods, bind a permitted gang, evict, and
apply submitted cluster objects.

Each publishes what it did, caused by the event it handled (so a redelivery republishes the
same event ids), and returns; the consume loop then acks. Start, bind and stop are idempotent
in the backend, so a redelivered event does no harm.

Tracing: each step is a span (`binder.start`, `binder.bind`, `binder.evict`) in the handled
event's trace, when spans are recorded; the pods it starts carry that trace's `traceparent`
(annotation `muster.dev/traceparent`), so what the watcher reports about them joins it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Coroutine
from typing import Any, NamedTuple, Protocol

import msgspec
from google.protobuf.message import Message

from muster.api import workload_from_json, workload_to_kueue
from muster.api.model import Workload
from muster.api.wellknown import BIND_FAILED, START_FAILED, TRACEPARENT_ANNOTATION
from muster.binder.pacing import BindPacer
from muster.binder.translate import (
    MissingPodSetError,
    pod_set_starts,
    workload_from_submitted,
)
from muster.bus.cancel import raise_if_cancelling
from muster.bus.envelope import new_event
from muster.bus.errors import Reject, Retry
from muster.bus.tracing import step, trace_headers
from muster.cluster.backend import ClusterBackend, Identity, PodSetStart, WorkloadOrigin
from muster.cluster.errors import ClusterError, RequestsRefusedError
from muster.contracts.v1 import events_pb2
from muster.metrics.services import BinderSeries

log = logging.getLogger(__name__)
CLUSTER_ADMINS = "system:masters"  # Kubernetes' group that no authorizer can refuse
# Finished and deleted workloads remembered, so their copies in this cluster are known stale.
DONE_KEPT = 100_000
# A cluster that does not answer is asked again after these many seconds, doubling.
_PROBE_FIRST_S, _PROBE_MAX_S = 0.2, 10.0


class Publisher(Protocol):
    async def publish(self, env: events_pb2.Envelope) -> int: ...


class Submission(NamedTuple):
    """What the binder keeps of a workload's `submitted`."""

    workload: Workload
    cluster: str  # where it was submitted
    owner_json: str  # the Job it stands for, as its owner wrote it ("" for none)


class WorkloadSpecs:
    """The spec of every workload submitted (on any cluster) and not yet done with, and when
    each was last admitted and evicted here.

    Fed from `workload.submitted`, `deleted` and `finished` of every cluster (MultiKueue may
    dispatch a workload submitted elsewhere to this one) and this cluster's `admitted` and
    `evicted`, by a replay of the stream, so every replica knows every workload whichever
    replica gets its `admitted`, and which copies from other clusters should be here.
    """

    def __init__(self, *, done_kept: int = DONE_KEPT) -> None:
        self._specs: dict[str, Submission] = {}
        self._evicted_at: dict[str, int] = {}  # stream sequence of its last eviction here
        self._admitted_at: dict[str, int] = {}  # and of its last admission here
        self._done: dict[str, None] = {}  # finished or deleted, the newest last
        self._done_kept = done_kept
        self.origins: set[str] = set()  # the clusters workloads were submitted in
        self.position = 0  # the last stream sequence applied

    def apply(self, env: events_pb2.Envelope) -> None:
        """Fold one event in; one already applied (by sequence) changes nothing."""
        if env.sequence:
            if env.sequence <= self.position:
                return
            self.position = env.sequence
        if env.type == "workload.evicted":
            self._evicted_at[env.workload] = max(
                env.sequence, self._evicted_at.get(env.workload, 0)
            )
        elif env.type == "workload.admitted":
            self._admitted_at[env.workload] = max(
                env.sequence, self._admitted_at.get(env.workload, 0)
            )
        elif env.type == "workload.submitted":
            wl = workload_from_submitted(env.submitted)
            if wl is None:
                log.warning("undecodable workload manifest", extra={"workload": env.workload})
                return
            owner = env.submitted.owner_manifest_json
            self._specs[env.workload] = Submission(wl, env.cluster, owner)
            self.origins.add(env.cluster)
        elif env.type in ("workload.deleted", "workload.finished"):
            self._specs.pop(env.workload, None)
            self._evicted_at.pop(env.workload, None)
            self._admitted_at.pop(env.workload, None)
            self._done[env.workload] = None
            if len(self._done) > self._done_kept:
                del self._done[next(iter(self._done))]

    def get(self, workload: str) -> Workload | None:
        found = self._specs.get(workload)
        return None if found is None else found.workload

    def submission(self, workload: str) -> Submission | None:
        return self._specs.get(workload)

    def superseded(self, env: events_pb2.Envelope) -> bool:
        """Whether `env` (an admission) was followed by an eviction here: the admission is
        no longer current (its cluster was lost meanwhile, and the workload moved on)."""
        return 0 < env.sequence < self._evicted_at.get(env.workload, 0)

    def stale(self, workload: str) -> bool:
        """Whether a copy of `workload` here is known to be stale (`muster.binder.copies`):
        it finished or was deleted, or was evicted here after its last admission here. A
        workload this binder knows nothing of is not (it may predate what it replayed)."""
        if workload in self._done:
            return True
        return self._evicted_at.get(workload, 0) > self._admitted_at.get(workload, 0)


class BinderContext:
    def __init__(
        self,
        *,
        cluster: str,
        backend: ClusterBackend,
        publisher: Publisher,
        specs: WorkloadSpecs,
        pacer: BindPacer,
        metrics: BinderSeries | None = None,
    ) -> None:
        self.cluster = cluster
        self.backend = backend
        self.publisher = publisher
        self.specs = specs
        self.pacer = pacer
        self.metrics = metrics
        self.source = f"binder/{cluster}"
        self._away = ""  # why the cluster did not answer, while it does not

    async def until_reachable(self, what: str) -> bool:
        """Wait until the cluster answers (`probe`), backing off; whether it was away. Its
        absence is logged once, with the cluster and what waits, and its return once."""
        delay_s = _PROBE_FIRST_S
        waited = False
        while failure := await self.backend.probe():
            raise_if_cancelling()  # a probe's timeout may have swallowed it (bus.cancel)
            why = failure.message
            if why != self._away:
                log.warning(
                    "cluster %s does not answer (%s): %s waits", self.cluster, why, what,
                    extra={"cluster": self.cluster},
                )  # fmt: skip
                self._away = why
            waited = True
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, _PROBE_MAX_S)
        if self._away:
            log.warning("cluster %s answers again", self.cluster, extra={"cluster": self.cluster})
            self._away = ""
        return waited

    async def publish(self, field: str, payload: Message, *, cause: events_pb2.Envelope) -> None:
        env = new_event(
            field,
            payload,
            cluster=self.cluster,
            workload=cause.workload,
            generation=cause.generation,
            cause=cause,
            source=self.source,
        )
        await self.publisher.publish(env)


async def _retry_or_reject(err: ClusterError, ctx: BinderContext, what: str) -> Exception:
    """What a failed cluster call becomes: Reject when it failed for good; Retry when it may
    pass later, once the cluster answers again (a worker whose API server is away is waited
    for here, not retried until the message is dead-lettered: it may be away for long)."""
    if not err.temporary:
        return Reject(f"{what}: {err}")
    if await ctx.until_reachable(what):
        return Retry(0.0, f"{what}: {err}; the cluster answers again")
    return Retry(1.0, f"{what}: {err}")


async def on_admitted(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Create the admitted workload's pods (the Job controller's part of unsuspending it).

    An admission superseded by a later eviction here is skipped: it was delivered late (this
    cluster was away) and the workload has been requeued, maybe to another cluster, since.
    When the cluster refuses the requests it was admitted with (a routed Job), nothing starts
    and `requests_refused` says why.
    """
    if ctx.specs.superseded(env):
        log.warning("skipping an admission evicted since", extra={"workload": env.workload})
        return
    submission = ctx.specs.submission(env.workload)
    wl = submission.workload if submission is not None else None
    if wl is None and env.admitted.manifest_json:
        # Submitted before what this replica replayed (it restarted after the `submitted` left
        # the stream): the admission carries the spec.
        wl = workload_from_json(env.admitted.manifest_json)
    if wl is None:
        # Its submitted event may not have reached this replica's spec replay yet.
        raise Retry(0.5, f"no spec known yet for {env.workload}")
    try:
        starts = pod_set_starts(wl, env.admitted)
    except MissingPodSetError as err:
        raise Reject(str(err)) from None
    origin = origin_of(env, submission, wl, cluster=ctx.cluster)
    with step("binder.start", attributes=lambda: {"muster.workload": env.workload}):
        try:
            await ctx.backend.start_workload(env.workload, pod_sets=traced(starts), origin=origin)
        except RequestsRefusedError as err:
            # Routed to requests the cluster will not run it with: nothing started. Admission
            # evicts it and puts it back on its declared queue (docs/routing.md, "On Kubernetes").
            log.warning("requests refused: %s", err, extra={"workload": env.workload})
            payload = events_pb2.RequestsRefused(message=str(err))
            await ctx.publish("requests_refused", payload, cause=env)
        except ClusterError as err:
            if origin is None or err.temporary:
                raise await _retry_or_reject(err, ctx, f"starting {env.workload}") from err
            # This worker will not create it (RBAC, a webhook, a quota): said to admission,
            # which sends it elsewhere, and shown on the manager's Workload.
            message = f"cluster {ctx.cluster}: {err}"
            log.warning("cannot start a copy: %s", message, extra={"workload": env.workload})
            rejected = events_pb2.GangRejected(reason=START_FAILED, message=message)
            await ctx.publish("gang_rejected", rejected, cause=env)


def origin_of(
    env: events_pb2.Envelope, submission: Submission | None, wl: Workload, *, cluster: str
) -> WorkloadOrigin | None:
    """Where an admitted workload comes from when MultiKueue dispatched it here from another
    cluster (None: it was submitted here, its objects are here)."""
    admitted = env.admitted
    origin = admitted.origin_cluster or (submission.cluster if submission is not None else "")
    if not origin or origin == cluster:
        return None
    owner = admitted.owner_manifest_json or (submission.owner_json if submission else "")
    manifest = admitted.manifest_json or json.dumps(workload_to_kueue(wl), sort_keys=True)
    return WorkloadOrigin(cluster=origin, workload_json=manifest, owner_json=owner)


def traced(starts: list[PodSetStart]) -> list[PodSetStart]:
    """`starts` with the current trace's `traceparent` on every pod (none: as they are)."""
    parent = trace_headers().get("traceparent")
    if not parent:
        return starts
    return [
        msgspec.structs.replace(s, annotations={**s.annotations, TRACEPARENT_ANNOTATION: parent})
        for s in starts
    ]


async def on_gang_permitted(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Bind every pod of the gang, then publish `bound`; any bind failure rejects the gang."""
    bindings = list(env.gang_permitted.bindings)

    async def bind(b: events_pb2.PodBinding) -> None:
        async with ctx.pacer.slot():
            started = time.perf_counter()
            await ctx.backend.bind(b.pod.namespace, b.pod.name, b.node)
            if ctx.metrics is not None:
                ctx.metrics.bound(time.perf_counter() - started)

    with step("binder.bind", attributes=lambda: {"muster.pods": len(bindings)}):
        results = await _settled([bind(b) for b in bindings])
    failures: list[tuple[events_pb2.PodBinding, ClusterError]] = []
    for b, result in zip(bindings, results, strict=True):
        if isinstance(result, ClusterError):
            failures.append((b, result))
            if ctx.metrics is not None:
                ctx.metrics.failed(temporary=result.temporary)
        elif isinstance(result, BaseException):
            raise result  # a bug: the consume loop naks and retries
    permanent = [(b, err) for b, err in failures if not err.temporary]
    if failures and not permanent:
        raise Retry(1.0, f"binding {env.workload}: {failures[0][1]}")
    if permanent:
        b, err = permanent[0]
        message = f"pod {b.pod.namespace}/{b.pod.name} to node {b.node}: {err.message}"
        if len(permanent) > 1:
            message += f" (and {len(permanent) - 1} more)"
        log.warning("gang bind failed: %s", message, extra={"workload": env.workload})
        payload = events_pb2.GangRejected(reason=BIND_FAILED, message=message)
        await ctx.publish("gang_rejected", payload, cause=env)
        return
    await ctx.publish("bound", events_pb2.PodsBound(bindings=bindings), cause=env)


async def _settled(calls: list[Coroutine[Any, Any, None]]) -> list[BaseException | None]:
    """What each of `calls` ended with (None: returned), run side by side; one is awaited
    in place (a gather makes a task of each)."""
    if len(calls) == 1:
        try:
            await calls[0]
        except Exception as err:  # returned, as gather(return_exceptions=True) would
            return [err]
        return [None]
    return await asyncio.gather(*calls, return_exceptions=True)


async def on_evict(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Stop the workload's pods (or exactly the pods listed), then publish
    `eviction_completed`."""
    pods = env.evict_requested.pods
    with step("binder.evict", attributes=lambda: {"muster.workload": env.workload}):
        try:
            if pods:
                await asyncio.gather(
                    *(ctx.backend.delete("Pod", p.name, namespace=p.namespace) for p in pods)
                )
            else:
                await ctx.backend.stop_workload(env.workload)
        except ClusterError as err:
            raise await _retry_or_reject(err, ctx, f"stopping {env.workload}") from err
    await ctx.publish("eviction_completed", events_pb2.EvictionCompleted(), cause=env)


async def on_apply(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Write the submitted objects into the cluster, in order (what `kubectl apply` does).

    Pods are created when absent and otherwise left alone: a Pod's spec is immutable, and a
    command redelivered after a crash must not undo a bind. Other kinds are replaced. An
    object the cluster refuses for good (a Node where the binder may not create Nodes, on
    Kubernetes) is logged by name and the others are still written; the command is then
    dead-lettered with one line per refused object. A temporary failure retries the command.

    Never a confused deputy: the objects are written as the user who submitted them (the
    gateway's `submitter`), so on Kubernetes the API server judges that user; a command
    without one is refused rather than written with the binder's own rights.
    """
    submitter = env.apply_requested.submitter
    if not submitter.user:
        raise Reject(f"{env.event_id}: cmd.apply without a submitter: not written as the binder")
    if CLUSTER_ADMINS in submitter.groups:
        # Impersonating this group is cluster-admin: never through muster, whoever asks.
        raise Reject(f"{env.event_id}: cmd.apply as a member of {CLUSTER_ADMINS}: refused")
    as_user = Identity(user=submitter.user, groups=tuple(submitter.groups))
    refused: list[str] = []
    for text in env.apply_requested.manifests_json:
        try:
            manifest = json.loads(text)
        except ValueError as err:
            raise Reject(f"undecodable manifest in {env.event_id}: {err}") from None
        if not isinstance(manifest, dict):
            raise Reject(f"manifest in {env.event_id} is not an object")
        try:
            if manifest.get("kind") == "Pod":
                await ctx.backend.create(manifest, as_user=as_user)
            else:
                await ctx.backend.apply(manifest, as_user=as_user)
        except ClusterError as err:
            if err.temporary:
                raise Retry(1.0, f"applying {manifest.get('kind')}: {err}") from err
            log.error("cluster refused an object: %s", err, extra={"object": err.obj})
            refused.append(str(err))
    if refused:
        raise Reject(f"refused by the cluster: {'; '.join(refused)}")

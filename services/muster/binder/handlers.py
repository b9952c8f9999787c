"""The binder's handlers: start an admitted workload's pods, bind a permitted gang, evict, and
apply submitted cluster objects.

Each publishes what it did, caused by the event it handled (so a redelivery republishes the
same event ids), and returns; the consume loop then acks. Start, bind and stop are idempotent
in the backend, fenced (`fences.py`: nothing older than a workload's latest eviction, finish or
deletion starts or binds; an eviction stops only the admissions before it) and, per workload,
done one at a time, so a redelivered or late event does no harm.

Tracing: each step is a span (`binder.start`, `binder.bind`, `binder.evict`) in the handled
event's trace, when spans are recorded; the pods it starts carry that trace's `traceparent`
(annotation `muster.dev/traceparent`), so what the watcher reports about them joins it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

import msgspec
from google.protobuf.message import Message

from muster.admitted_podsets import created_on_nodes
from muster.api.jobset import INTEGRATION_KINDS
from muster.api.model import Workload
from muster.api.wellknown import (
    BIND_FAILED,
    PARTITION_ANNOTATION,
    START_FAILED,
    TRACEPARENT_ANNOTATION,
)
from muster.binder.fences import Fences, WorkloadLocks
from muster.binder.manifests import ManifestChanges
from muster.binder.pacing import BindPacer
from muster.binder.stopped import StoppedPods
from muster.binder.translate import (
    AdmissionMismatchError,
    pod_set_starts,
)
from muster.bus.cancel import raise_if_cancelling
from muster.bus.envelope import new_event
from muster.bus.errors import Reject, Retry
from muster.bus.progress import advanced
from muster.bus.tracing import step, trace_headers
from muster.cluster.backend import ClusterBackend, Identity, PodSetStart, WorkloadOrigin
from muster.cluster.batches import run_in_batches, settle_in_batches
from muster.cluster.errors import ClusterError, PodSetUpdateConflictError, RequestsRefusedError
from muster.contracts.v1 import events_pb2
from muster.core.conditions import FAILED_TO_START
from muster.core.submissions import ENDED_KEPT_S, EndedSubmissions
from muster.metrics.services import BinderSeries
from muster.payloads import (
    MANIFEST_COPY_LIMIT,
    KeptManifest,
    PayloadError,
    manifest_document,
    workload_manifest,
    written_workload,
)

log = logging.getLogger(__name__)

CLUSTER_ADMINS = "system:masters"  # Kubernetes' group that no authorizer can refuse
# A cluster that does not answer is asked again after these many seconds, doubling.
_PROBE_FIRST_S, _PROBE_MAX_S = 0.2, 10.0


class Publisher(Protocol):
    async def publish(self, env: events_pb2.Envelope) -> int: ...


Recall = Callable[[int], Awaitable[events_pb2.Envelope | None]]
# Bring in the spec of an admission's workload this replica has none of: its replay caught up
# to the admission (the `submitted` came before it), else its cluster's MUSTER_MANIFESTS_<c> read.
Recover = Callable[[events_pb2.Envelope], Awaitable[None]]


class Submission(NamedTuple):
    """What the binder keeps of a workload's `submitted`."""

    manifest: KeptManifest  # decoded when this cluster first starts or binds it
    cluster: str  # where it was submitted
    owner_json: str  # the Job it stands for, as its owner wrote it ("" for none)

    @property
    def workload(self) -> Workload | None:
        """Its Workload; None when the manifest does not decode."""
        return self.manifest.workload()


class Admission(NamedTuple):
    """A workload's last admission here, and its pods as `on_admitted` read them."""

    env: events_pb2.Envelope
    # Its podsets as started (`pod_set_starts`), kept so that each `gang_permitted` creating its
    # pods (a permit may come in parts) reads neither the manifest nor the admission again;
    # None when not read here (kept from the stream by the spec follower).
    starts: list[PodSetStart] | None = None


class WorkloadSpecs:
    """The spec of every workload submitted (on any cluster) and not yet done with, and the
    last admission of each here.

    Fed from `workload.submitted`, `deleted` and `finished` of every cluster (MultiKueue may
    dispatch a workload submitted elsewhere to this one) and this cluster's `admitted`, by a
    replay of the stream, so every replica knows every workload whichever replica gets its
    `admitted`, and (with the fences) which copies from other clusters are current here.
    """

    def __init__(self, *, ended_kept_s: float = ENDED_KEPT_S) -> None:
        self._specs: dict[str, Submission] = {}
        self._admitted_at: dict[str, int] = {}  # stream sequence of its last admission here
        # Its last admission here, for pods created at their `gang_permitted` (`on_admitted`).
        self._admissions: dict[str, Admission] = {}
        self._ended = EndedSubmissions(kept_s=ended_kept_s)
        self.origins: set[str] = set()  # the clusters workloads were submitted in
        self.position = 0  # the last stream sequence applied
        self.manifests = ManifestChanges()  # what MUSTER_MANIFESTS_<c> must hold (manifests.py)

    def apply(self, env: events_pb2.Envelope) -> None:
        """Fold one event in; one already applied (by sequence) changes nothing."""
        if env.sequence:
            if env.sequence <= self.position:
                return
            self.position = env.sequence
        if env.type == "workload.admitted":
            self._admitted_at[env.workload] = env.sequence
            self.admitted_here(env)
        elif env.type == "workload.submitted":
            manifest = KeptManifest(env.submitted.manifest_json, what=env.workload)
            owner = env.submitted.owner_manifest_json
            self._specs[env.workload] = Submission(manifest, env.cluster, owner)
            self._ended.submitted(env.workload, env.event_id, at_s=env.time_unix_nano / 1e9)
            self.origins.add(env.cluster)
            self.manifests.submitted(env)
        elif env.type in ("workload.deleted", "workload.finished"):
            self._specs.pop(env.workload, None)
            self._admitted_at.pop(env.workload, None)
            self._admissions.pop(env.workload, None)
            self._ended.ended(env.workload, at_s=env.time_unix_nano / 1e9)
            self.manifests.ended(env.workload)

    def ended(self, submitted_id: str) -> bool:
        """Whether a decision naming `submitted_id` (`Envelope.submitted_id`: an admission, an
        eviction) is about a workload that finished or was deleted since: admission decided
        before it read that, and stored the decision after it (its name may be submitted
        again since)."""
        return submitted_id in self._ended

    def get(self, workload: str) -> Workload | None:
        found = self._specs.get(workload)
        return None if found is None else found.workload

    def replaced(self, workload: str, submitted_id: str) -> bool:
        """Whether a decision naming `submitted_id` is about an earlier workload of the name
        `workload` has now (ended, and submitted again since): an eviction of it must not
        stop the new one's pods. One that ended without a successor is still carried out:
        its pods here (a MultiKueue copy that finished elsewhere) must go."""
        return self._ended.replaced(workload, submitted_id)

    def submission(self, workload: str) -> Submission | None:
        return self._specs.get(workload)

    def admitted_at(self, workload: str) -> int:
        """The stream sequence of its last admission here (0: none known)."""
        return self._admitted_at.get(workload, 0)

    def admission(self, workload: str) -> Admission | None:
        """Its last admission here (None: none known)."""
        return self._admissions.get(workload)

    def admitted_here(
        self, env: events_pb2.Envelope, *, starts: list[PodSetStart] | None = None
    ) -> None:
        """Keep admission `env` (with its pods' `starts`, when read) as its workload's last
        here, unless a later one is kept; the same one read already keeps its starts."""
        kept = self._admissions.get(env.workload)
        if kept is not None and kept.env.sequence == env.sequence and starts is None:
            return
        if kept is None or kept.env.sequence <= env.sequence:
            self._admissions[env.workload] = Admission(env, starts)


def follow(env: events_pb2.Envelope, specs: WorkloadSpecs, fences: Fences) -> None:
    """Fold one followed event (`spec_subjects`) into the specs and the fences. A late
    `evicted` of a workload that ended and whose name was submitted again since fences
    nothing: the new workload may be admitted here already (docs/events.md, "A name used
    again")."""
    specs.apply(env)
    if env.type != "workload.evicted" or not specs.replaced(env.workload, env.submitted_id):
        fences.apply(env)


class BinderContext:
    def __init__(
        self,
        *,
        cluster: str,
        backend: ClusterBackend,
        publisher: Publisher,
        specs: WorkloadSpecs,
        pacer: BindPacer,
        fences: Fences | None = None,
        metrics: BinderSeries | None = None,
        admissions: Recall | None = None,
        submissions: Recover | None = None,
        bound_for_created: bool = True,
    ) -> None:
        self.cluster = cluster
        self.bound_for_created = bound_for_created
        self._recall = admissions
        self.recover = submissions
        self.backend = backend
        self.publisher = publisher
        self.specs = specs
        self.pacer = pacer
        self.fences = fences if fences is not None else Fences(cluster=cluster)
        self.locks = WorkloadLocks()  # start, binds and stop of one workload: one at a time
        self.stopped = StoppedPods()  # pods stopped by placement evictions, counted once
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
            advanced()  # waiting for the cluster is not a stall of the consumer (bus/progress.py)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, _PROBE_MAX_S)
        if self._away:
            log.warning("cluster %s answers again", self.cluster, extra={"cluster": self.cluster})
            self._away = ""
        return waited

    async def recall_admission(self, sequence: int) -> events_pb2.Envelope | None:
        """The `admitted` of this cluster stored at `sequence`, read back from the stream
        (None: none there, or no stream to read)."""
        return None if self._recall is None else await self._recall(sequence)

    def pod_sets(self, workload: str) -> dict[str, int] | None:
        """The most pods each podset of `workload` may have (its spec's counts: an admission
        may shrink them), so its pods can be found by name; None when its spec is unknown."""
        wl = self.specs.get(workload)
        return None if wl is None else {ps.name: ps.count for ps in wl.pod_sets}

    async def publish(
        self, field: str, payload: Message, *, cause: events_pb2.Envelope, submitted_id: str = ""
    ) -> None:
        env = new_event(
            field,
            payload,
            cluster=self.cluster,
            workload=cause.workload,
            generation=cause.generation,
            cause=cause,
            source=self.source,
        )
        env.submitted_id = submitted_id
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
    """Create the admitted workload's pods (the Job controller's part of unsuspending it),
    labelled with the admission's stream sequence.

    An admission behind the workload's fence (evicted here since, finished or deleted) is
    skipped: it was delivered late (a redelivery after a crash, or this cluster was away).
    The start holds the workload's lock, so an eviction here waits for it or goes first; one
    fenced by another replica while the pods were being written is undone at once. When the
    cluster refuses the requests it was admitted with (a routed Job), nothing starts and
    `requests_refused` says why.
    """
    key, admission = env.workload, env.sequence
    # A spec this replica lacks, that the admission carries no (whole) copy of, is brought in,
    # or is gone.
    lacking = "" if ctx.specs.submission(key) is not None else lacking_copy(env, ctx.cluster)
    recover = ctx.recover if lacking else None
    if recover is not None:
        await recover(env)
    submission = ctx.specs.submission(key)
    wl = submission.workload if submission is not None else None
    stale = ctx.fences.stale(key, admission, known=wl is not None)
    if stale or ctx.specs.ended(env.submitted_id):
        log.info("skipping an admission evicted or ended since", extra={"workload": key})
        return
    if wl is None and env.admitted.manifest_json:
        # Submitted before what this replica replayed (it restarted after the `submitted` left
        # the stream): the admission carries the spec.
        # One that does not decode never will: dead-lettered, naming the workload.
        try:
            wl = written_workload(env.admitted.manifest_json, what=key)
        except PayloadError as err:
            raise Reject(str(err)) from None
    if recover is not None and submission is None:
        await _never_startable(env, ctx, lacking)
        return
    if wl is None:
        # Its submitted event may not have reached this replica's spec replay yet.
        raise Retry(0.5, f"no spec known yet for {key}")
    try:
        starts = pod_set_starts(wl, env.admitted)
    except AdmissionMismatchError as err:
        raise Reject(str(err)) from None
    origin = origin_of(env, submission, wl, cluster=ctx.cluster)
    if origin is None and created_on_nodes(
        env.admitted, wl, cluster=ctx.cluster, creates_on_nodes=ctx.backend.creates_on_nodes
    ):
        # Placed before its pods exist: each is created on its node at `gang_permitted`
        # (docs/events.md, "Pods created on their nodes"), one write instead of two.
        ctx.specs.admitted_here(env, starts=starts)
        return
    with step("binder.start", attributes=lambda: {"muster.workload": key}):
        async with ctx.locks.hold(key):
            if ctx.fences.stale(key, admission):
                return  # evicted here while this start waited for the lock
            await _start(env, ctx, starts, origin)


def lacking_copy(env: events_pb2.Envelope, cluster: str) -> str:
    """What admission `env` lacks to start its workload without the `submitted`: "manifest"
    (no copy of it), "Job's manifest" (a MultiKueue copy of a Job's or JobSet's Workload
    without the copy of that Job: the worker would run a bare Workload the manager cannot
    follow), or "" (nothing). Both copies are left out over MANIFEST_COPY_LIMIT."""
    admitted = env.admitted
    if not admitted.manifest_json:
        return "manifest"
    if admitted.owner_manifest_json or admitted.origin_cluster in ("", cluster):
        return ""
    try:
        wl = written_workload(admitted.manifest_json, what=env.workload)
    except PayloadError:
        return ""  # dead-lettered with its reason as it is decoded to start
    return "Job's manifest" if stands_for_owner(wl) else ""


# The owners muster submits a Workload for with the owner's manifest (the watcher's Jobs and
# JobSets, `owner_manifest_json`): their Workload's copy elsewhere needs that manifest too.
def stands_for_owner(wl: Workload) -> bool:
    """Whether `wl` is the Workload of a Job or JobSet (its controller reference names one)."""
    return any(
        ref.controller and (ref.api_version, ref.kind) in INTEGRATION_KINDS
        for ref in wl.meta.owner_references
    )


async def _never_startable(env: events_pb2.Envelope, ctx: BinderContext, lacking: str) -> None:
    """End an admitted workload whose manifest (or its owner's) is gone for good (its
    `submitted` left the stream, its admission carries no copy, MUSTER_MANIFESTS_<c> holds
    none): it would otherwise hold its quota for ever, or start half. Ended as Kueue's job
    framework ends a workload whose start can never succeed (Finished, reason FailedToStart),
    the message saying why; admission frees its quota."""
    message = (
        f"{env.workload} cannot be started: its {lacking} is no longer known (its submission "
        f"left the event stream; its admission carries no copy, being over "
        f"{MANIFEST_COPY_LIMIT // 1024} KiB or from before copies; and no binder kept it): "
        "submit it again"
    )
    log.warning("ending an admitted workload: %s", message, extra={"workload": env.workload})
    await _end_unstartable(env, ctx, message)


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
    manifest = admitted.manifest_json or workload_manifest(wl)
    return WorkloadOrigin(cluster=origin, workload_json=manifest, owner_json=owner)


async def _start(
    env: events_pb2.Envelope,
    ctx: BinderContext,
    starts: list[PodSetStart],
    origin: WorkloadOrigin | None,
) -> None:
    """Create the pods (under the workload's lock), first a copy of what they come from when
    they come from another cluster; take them out again if a fence went up meanwhile."""
    key = env.workload
    try:
        await _start_fenced(ctx, env, starts, origin=origin)
    except RequestsRefusedError as err:
        await _requests_refused(env, ctx, err)
    except PodSetUpdateConflictError as err:
        await _failed_to_start(env, ctx, err)
    except ClusterError as err:
        if origin is None or err.temporary:
            raise await _retry_or_reject(err, ctx, f"starting {key}") from err
        # This worker will not create it (RBAC, a webhook, a quota): said to admission,
        # which sends it elsewhere, and shown on the manager's Workload.
        message = f"cluster {ctx.cluster}: {err}"
        log.warning("cannot start a copy: %s", message, extra={"workload": key})
        rejected = events_pb2.GangRejected(reason=START_FAILED, message=message)
        await ctx.publish("gang_rejected", rejected, cause=env)


async def _start_fenced(
    ctx: BinderContext,
    admitted: events_pb2.Envelope,
    starts: list[PodSetStart],
    *,
    origin: WorkloadOrigin | None = None,
    nodes: dict[str, str] | None = None,
) -> bool:
    """Create the pods of admission `admitted` (those of `nodes` only, on their nodes, when
    given); take them out again if a fence went up meanwhile (evicted by another replica):
    whether they stay."""
    key, admission = admitted.workload, admitted.sequence
    await ctx.backend.start_workload(
        key,
        pod_sets=traced(in_partition(starts, admitted.partition)),
        admission=admission,
        origin=origin,
        nodes=nodes,
        # A workload with admission checks: their podSetUpdates go onto its pods.
        checked=not admitted.admitted.with_reservation,
    )
    if not ctx.fences.stale(key, admission):
        return True
    await ctx.backend.stop_workload(
        key, before=ctx.fences.fence_of(key), pod_sets=ctx.pod_sets(key)
    )
    return False


def in_partition(starts: list[PodSetStart], partition: str) -> list[PodSetStart]:
    """`starts` with the workload's admission partition on every pod ("": as they are), so
    that the watcher's reports about them go to that partition's replica alone, not to every
    replica (docs/events.md, "Partitions")."""
    if not partition:
        return starts
    return [
        msgspec.structs.replace(s, annotations={**s.annotations, PARTITION_ANNOTATION: partition})
        for s in starts
    ]


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
    """Bind every pod of the gang (or of this part of its permit), then publish `bound`; any
    bind failure rejects the gang.

    Only the pods the permit names by uid are bound (a pod of that name made again since, for
    a later admission, is not the one gang-permit placed). A permit stored before the gang's
    latest eviction here, finish or deletion is skipped.
    """
    permitted = env.gang_permitted
    # A permit to create is fenced as its admission is: the eviction that ends the admission
    # may be stored before the permit (gang-permit had not read it yet).
    sequence = permitted.admission_sequence if permitted.create else env.sequence
    if ctx.fences.stale(env.workload, sequence):
        log.info("skipping a permit evicted or ended since", extra={"workload": env.workload})
        return
    async with ctx.locks.hold(env.workload):
        if permitted.create:
            await _create_gang(env, ctx)
        else:
            await _bind_gang(env, ctx)


async def _create_gang(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Create the pods the permit names, each on its node, for the admission it names (the
    workload's last here: a permit of an earlier one is skipped); then publish `bound`, unless
    `ctx.bound_for_created` is off and the permit is whole: its pods, stored on their nodes,
    answer it (gang-permit's watch sees them; docs/events.md, "`bound` only for binds")."""
    key, permitted = env.workload, env.gang_permitted
    found = await _admission_of(env, ctx)
    if found is None:
        log.info("skipping a permit of an admission ended since", extra={"workload": key})
        return
    admitted, starts = found
    if starts is None:  # admitted while another replica, or an earlier run, handled it
        wl = ctx.specs.get(key)
        try:
            if wl is None:  # submitted before what this replica replayed: the admission has it
                wl = written_workload(admitted.admitted.manifest_json, what=key)
            starts = pod_set_starts(wl, admitted.admitted)
        except (PayloadError, AdmissionMismatchError) as err:
            raise Reject(str(err)) from None
    nodes = {b.pod.name: b.node for b in permitted.bindings}
    with step("binder.create", attributes=lambda: {"muster.pods": len(nodes)}):
        started = time.perf_counter()
        try:
            if not await _start_fenced(ctx, admitted, starts, nodes=nodes):
                return
        except RequestsRefusedError as err:
            await _requests_refused(env, ctx, err)
            return
        except ClusterError as err:
            if ctx.metrics is not None:  # putting them on their nodes failed, as a bind's
                ctx.metrics.failed(temporary=err.temporary)
            if err.temporary:
                raise await _retry_or_reject(err, ctx, f"creating {key}'s pods") from err
            await _bind_failed(env, ctx, f"pods of {key}: {err.message}")
            return
        if ctx.metrics is not None:
            ctx.metrics.created(len(nodes), time.perf_counter() - started)
    # A permit in parts is still answered part by part: gang-permit counts the parts' answers
    # to re-place a gang one of whose parts failed (a pod seen on its node answers no part).
    if ctx.bound_for_created or permitted.parts > 1:
        await _answer_bound(env, ctx)


async def _requests_refused(
    env: events_pb2.Envelope, ctx: BinderContext, err: RequestsRefusedError
) -> None:
    """Routed to requests the cluster will not run it with: nothing started. Admission evicts
    it and puts it back on its declared queue (docs/routing.md, "On Kubernetes")."""
    log.warning("requests refused: %s", err, extra={"workload": env.workload})
    payload = events_pb2.RequestsRefused(message=str(err))
    await ctx.publish("requests_refused", payload, cause=env)


async def _failed_to_start(
    env: events_pb2.Envelope, ctx: BinderContext, err: PodSetUpdateConflictError
) -> None:
    """Its checks asked its pods for values they already have otherwise: nothing started, and
    never will. Ended as Kueue's job framework ends it (FailedToStart); admission frees its
    quota at the `finished`."""
    log.warning("%s failed to start: %s", env.workload, err, extra={"workload": env.workload})
    await _end_unstartable(env, ctx, err.message)


async def _end_unstartable(env: events_pb2.Envelope, ctx: BinderContext, message: str) -> None:
    """Publish the `finished` of admitted workload `env` that can never start: Kueue's job
    framework ends such a one Finished, reason FailedToStart (a permanent start error), rather
    than retry for ever."""
    finished = events_pb2.WorkloadFinished(succeeded=False, message=message, reason=FAILED_TO_START)
    await ctx.publish("finished", finished, cause=env, submitted_id=env.submitted_id)


async def _bind_gang(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    bindings = env.gang_permitted.bindings

    async def bind(b: events_pb2.PodBinding) -> None:
        async with ctx.pacer.slot():
            started = time.perf_counter()
            await ctx.backend.bind(b.pod.namespace, b.pod.name, b.node, uid=b.pod.uid)
            if ctx.metrics is not None:
                ctx.metrics.bound(time.perf_counter() - started)

    with step("binder.bind", attributes=lambda: {"muster.pods": len(bindings)}):
        # A batch at a time (cluster/batches.py): a gang of 100 000 pods neither holds a task
        # per pod nor keeps the loop from others' events. Every pod is still tried, and the
        # gang answered as a whole once all were.
        failed = await settle_in_batches(bindings, bind)
    failures: list[tuple[events_pb2.PodBinding, ClusterError]] = []
    for b, err in failed:
        if not isinstance(err, ClusterError):
            raise err  # a bug: the consume loop naks and retries
        failures.append((b, err))
        if ctx.metrics is not None:
            ctx.metrics.failed(temporary=err.temporary)
    permanent = [(b, err) for b, err in failures if not err.temporary]
    if failures and not permanent:
        raise Retry(1.0, f"binding {env.workload}: {failures[0][1]}")
    if permanent:
        b, err = permanent[0]
        message = f"pod {b.pod.namespace}/{b.pod.name} to node {b.node}: {err.message}"
        if len(permanent) > 1:
            message += f" (and {len(permanent) - 1} more)"
        await _bind_failed(env, ctx, message)
        return
    await _answer_bound(env, ctx)


async def _admission_of(env: events_pb2.Envelope, ctx: BinderContext) -> Admission | None:
    """The admission a permit to create names; None when the workload was admitted here again
    since, or that admission's workload ended (its name may be submitted again)."""
    key, admission = env.workload, env.gang_permitted.admission_sequence
    if not admission:
        raise Reject(f"permit {env.event_id} of {key}: creates pods for no admission")
    kept = ctx.specs.admission(key)
    if kept is not None and kept.env.sequence > admission:
        return None
    if kept is None or kept.env.sequence != admission:
        # Handled by another replica, or before this one restarted: read back.
        admitted = await ctx.recall_admission(admission)
        if admitted is None or admitted.workload != key:
            raise Reject(f"permit {env.event_id}: no admission of {key} at {admission}")
        kept = Admission(admitted)
    return None if ctx.specs.ended(kept.env.submitted_id) else kept


async def _bind_failed(env: events_pb2.Envelope, ctx: BinderContext, message: str) -> None:
    """Reject the permitted gang: its pods could not be put on their nodes, for good."""
    log.warning("gang bind failed: %s", message, extra={"workload": env.workload})
    payload = events_pb2.GangRejected(reason=BIND_FAILED, message=message)
    await ctx.publish("gang_rejected", payload, cause=env)


async def _answer_bound(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Publish `bound` for the permit (or permit part) `env`: its pods are on their nodes."""
    # A permit in parts is answered part by part (docs/events.md, "Permits in parts"): each
    # part's `bound` carries what its part did, so it fits as the part did.
    permitted = env.gang_permitted
    bound = events_pb2.PodsBound(
        bindings=permitted.bindings,
        part=permitted.part,
        parts=permitted.parts,
        permit_id=permitted.permit_id,
    )
    await ctx.publish("bound", bound, cause=env)


async def on_evict(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Stop the pods of the admission the eviction ends (or exactly the pods listed), then
    publish `eviction_completed` naming the eviction.

    The fence goes up before anything is listed, under the workload's lock: no admission
    stored before the eviction starts pods afterwards. Pods of a later admission are left
    alone, and an eviction carried out already is not carried out again (nothing published),
    nor one naming a workload that ended and was submitted again since (answered with
    `eviction_dropped`; docs/events.md, "A name used again"). A placement eviction (pods
    listed) is answered every time it comes, saying how many of its pods were `gone` already.
    """
    command = env.evict_requested
    key, eviction = env.workload, command.eviction_sequence
    if ctx.specs.replaced(key, env.submitted_id):
        # Decided before the workload ended, stored after its name was submitted again:
        # the pods of that name now are the new workload's. The answer settles the eviction,
        # so the preemption service stops asking.
        log.info("dropping an eviction of a workload replaced since", extra={"workload": key})
        await _dropped(env, ctx)
        return
    if ctx.fences.done(key, eviction):
        log.info("eviction already carried out", extra={"workload": key})
        return
    gone = 0  # of the pods named, those gone already: a copy or re-send stops nothing again
    async with ctx.locks.hold(key):
        ctx.fences.fence(key, eviction)
        with step("binder.evict", attributes=lambda: {"muster.workload": key}):
            try:
                if command.pods:

                    async def delete(p: events_pb2.PodRef) -> None:
                        nonlocal gone
                        ns, uid = p.namespace, p.uid
                        deleted = await ctx.backend.delete("Pod", p.name, namespace=ns, uid=uid)
                        if not deleted or not ctx.stopped.first_stop(uid, env.event_id):
                            gone += 1  # gone, or still terminating since an earlier command

                    await run_in_batches(command.pods, delete)
                else:
                    await ctx.backend.stop_workload(
                        key, before=eviction, pod_sets=ctx.pod_sets(key)
                    )
            except ClusterError as err:
                raise await _retry_or_reject(err, ctx, f"stopping {key}") from err
        payload = events_pb2.EvictionCompleted(
            eviction_id=command.eviction_id,
            eviction_sequence=eviction,
            # What this command stopped, so that a reader tells a placement eviction of pods
            # (perhaps one part of several) from the end of a workload's admission.
            pods=len(command.pods),
            part=command.part,
            parts=command.parts,
            command_id=command.command_id,
            # Every copy is answered (a lost answer is recovered by the next), each saying
            # what it stopped: `pods - gone` (docs/events.md).
            gone=gone,
        )
        await ctx.publish("eviction_completed", payload, cause=env)
        ctx.stopped.answered(p.uid for p in command.pods)
        ctx.fences.completed(key, eviction)


async def _dropped(env: events_pb2.Envelope, ctx: BinderContext) -> None:
    """Answer a `cmd.evict` dropped as late with `eviction_dropped`, naming its eviction and,
    in the envelope, the ended submission it was about."""
    command = env.evict_requested
    payload = events_pb2.EvictionDropped(
        eviction_id=command.eviction_id, eviction_sequence=command.eviction_sequence
    )
    await ctx.publish("eviction_dropped", payload, cause=env, submitted_id=env.submitted_id)


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
    for n, text in enumerate(env.apply_requested.manifests_json):
        try:
            manifest = manifest_document(text, what=f"{env.event_id}: manifests_json[{n}]")
        except PayloadError as err:
            raise Reject(str(err)) from None
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

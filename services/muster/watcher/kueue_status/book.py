"""The statuses of one cluster's Kueue objects (`StatusBook`): each Workload's as its events
move it on, over the queues' (`queues.QueueBook`)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

from muster.api.check_states import AnsweredCheck, ChecksWanted
from muster.api.model import AdmissionFairSharingConfig, PodSet, RequeuingStrategy
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.conditions import (
    DEACTIVATED,
    DEACTIVATED_MESSAGE,
    QUOTA_RESERVED,
    READY_MESSAGE,
    RECOVERED,
    STARTED,
    WAIT_FOR_RECOVERY,
    WAIT_FOR_RECOVERY_MESSAGE,
)
from muster.core.requeue_state import later, retry_end_s
from muster.payloads import check_transitioned_s
from muster.watcher.kueue_status.followed import (
    ACTIVE_CHANGED,
    EVICTION_COMPLETED,
    READINESS_EVENTS,
    RECLAIMABLE_PODS,
    WORKLOAD_EVENTS,
)
from muster.watcher.kueue_status.queues import QueueBook
from muster.watcher.kueue_status.transitions import (
    NO_RESERVATION,
    keep_retry_end,
    requeue_state,
    transition,
    waiting_for_start,
)
from muster.watcher.kueue_status.workload import (
    WorkloadRecord,
    manifest_reclaimable,
    reclaimable_list,
    reclaimed_of,
    workload_ref,
)

_DEFAULT_QUEUE = "default"  # a workload naming no LocalQueue is in its namespace's "default"
_ADMISSION_SOURCE = "admission/"  # Envelope.source of admission's decisions

# The owners whose Kueue Workload muster created and keeps status.reclaimablePods of.
_JOB_KINDS = frozenset({"Job", "JobSet"})


class StatusBook(QueueBook):
    """The statuses of one cluster's Kueue objects, as the events so far make them."""

    def __init__(
        self,
        *,
        kueue_version: str = "v1beta1",
        cluster: str = "",
        pods_ready: bool = False,
        granular: bool = True,
        requeuing: RequeuingStrategy | None = None,
        fair: AdmissionFairSharingConfig | None = None,
        reclaimable_pods: bool = True,
    ) -> None:
        self._cluster = cluster  # its own: a workload admitted elsewhere shows clusterName
        # Kueue's UnadmittedWorkloadsObservability (on by default): granular QuotaReserved
        # reasons (PendingEvaluation, Deactivated) where admission's events give none.
        self._granular = granular
        # waitForPodsReady is on: Kueue keeps a PodsReady condition on every job's Workload.
        self._pods_ready = pods_ready
        # waitForPodsReady's back-off, for requeueState.requeueAt.
        self._requeuing = RequeuingStrategy() if requeuing is None else requeuing
        self._workloads: dict[str, WorkloadRecord] = {}
        super().__init__(
            kueue_version=kueue_version,
            cluster=cluster,
            fair=fair,
            reclaimable_pods=reclaimable_pods,
        )

    # --- events -------------------------------------------------------------------------------

    def apply(self, env: pb.Envelope) -> set[ObjectRef]:
        """Fold one event in; the objects whose status it may have changed."""
        field = env.WhichOneof("payload")
        if field == "queue_status":
            return self._queue_status(env.queue_status.cluster_queue)
        if field in ("config_applied", "config_deleted"):
            return self._config(env)
        if field == "admission_check":
            return self._retry(env) | self._answer(env)
        if field in READINESS_EVENTS:
            return self._readiness(env)
        if field == ACTIVE_CHANGED:
            return self._deactivated(env)
        if field == RECLAIMABLE_PODS:
            return self._reclaimable(env)
        if field == EVICTION_COMPLETED and env.eviction_completed.pods:
            return set()  # a placement eviction's answer (pods outside Kueue, maybe one part)
        if field in WORKLOAD_EVENTS or field == EVICTION_COMPLETED:
            at_s = env.time_unix_nano / 1e9
            refs = self._workload_event(env.workload, field, getattr(env, field), at_s=at_s)
            wl = self._workloads.get(env.workload)
            if wl is not None and self._pods_ready:
                waiting_for_start(wl)
            if field == "admitted" and wl is not None:
                wl.cluster_name = env.cluster if env.cluster != self._cluster else ""
            return refs
        return set()

    def _readiness(self, env: pb.Envelope) -> set[ObjectRef]:
        """Its pods are all ready (a `running` that says so, or a `pods_ready`): PodsReady
        True while it is admitted (Kueue's minimum for it)."""
        wl = self._workloads.get(env.workload)
        if wl is None or not self._pods_ready or wl.state != "admitted":
            return set()
        payload = env.WhichOneof("payload")
        if payload == "running" and not env.running.pods_ready:
            return set()
        was = wl.conditions.get("PodsReady", {})
        if payload == "pods_ready" and env.pods_ready.lost:
            if was.get("status") != "True":
                return set()  # Kueue: lost only once it was ready (else it waits for start)
            wl.set("PodsReady", False, WAIT_FOR_RECOVERY, WAIT_FOR_RECOVERY_MESSAGE)
        elif was.get("reason") in (WAIT_FOR_RECOVERY, RECOVERED):
            wl.set("PodsReady", True, RECOVERED, READY_MESSAGE)
        else:
            wl.set("PodsReady", True, STARTED, READY_MESSAGE)
        return {workload_ref(env.workload)}

    def _reclaimable(self, env: pb.Envelope) -> set[ObjectRef]:
        """A workload's reclaimable pods changed: its run in its LocalQueue's fair sharing
        usage holds what is left from the event's time, as admission's does. Of a Job's
        Workload (a Job's finished pods, a JobSet's succeeded Jobs), reclaimablePods follows,
        the whole list, as Kueue's job reconciler writes it; no longer once the Workload
        finished (the reconciler stops at a finished one)."""
        wl = self._workloads.get(env.workload)
        if wl is None or wl.state == "finished":
            return set()
        pods = reclaimable_list((p.pod_set, p.count) for p in env.reclaimable_pods.pods)
        wl.reclaimed = reclaimed_of(pods)
        refs = self._resized(env.workload, wl, at_s=env.time_unix_nano / 1e9)
        if wl.reclaimable is not None:
            wl.reclaimable = pods
            refs.add(workload_ref(env.workload))
        return refs

    def _deactivated(self, env: pb.Envelope) -> set[ObjectRef]:
        """A pending workload deactivated (Kueue's workload controller evicts it too, though
        it holds nothing: Evicted True Deactivated unless already evicted; QuotaReserved
        Deactivated). One holding quota is evicted by admission (`evicted`, Deactivated)."""
        wl = self._workloads.get(env.workload)
        if wl is None or env.active_changed.active or wl.state != "pending":
            return set()
        tally = self._tally(wl.local_queue)
        tally.add(wl, -1)
        wl.state = "inactive"
        wl.requeue_count, wl.requeue_at_s = 0, None  # Kueue clears requeueState
        tally.add(wl, 1)
        if wl.conditions.get("Evicted", {}).get("status") != "True":
            wl.set("Evicted", True, DEACTIVATED, DEACTIVATED_MESSAGE)
            wl.retry_ends = {}  # evicted now: its checks reset
        if self._granular:
            wl.say([(QUOTA_RESERVED, False, DEACTIVATED, DEACTIVATED_MESSAGE), NO_RESERVATION])
        return {workload_ref(env.workload), self._lq_ref(wl.local_queue)}

    def _retry(self, env: pb.Envelope) -> set[ObjectRef]:
        """A check's Retry with requeueAfterSeconds while the workload holds quota: the
        requeueAt it asks for, counted from when the check entered Retry (its entry's
        lastTransitionTime, as admission counts it), and only ever later
        (`core.requeue_state.later`). Before its eviction it is kept for the eviction it
        causes (`transitions.requeue_state`); once evicted (its pods stopping after a
        PodsReady timeout, say, or gone while it waits for its back-off's end), requeueAt
        moves on at once, as admission's wait does (Kueue's NeedsRequeueAtUpdate); and so it
        does once it is queued again, waiting for quota (admission holds it out of its queue
        until then). A check its ClusterQueue does not name moves nothing, as in admission
        (`QueueBook.names_check`)."""
        wl = self._workloads.get(env.workload)
        check = env.admission_check
        if wl is not None:
            keep_retry_end(wl, check, check_transitioned_s(env))
        if wl is None or check.state != "Retry" or not self.names_check(wl, check.check):
            return set()
        # Without quota (backing off, or queued for quota) requeueAt moves too: Kueue's
        # NeedsRequeueAtUpdate runs for any unfinished workload, and admission holds a queued
        # one out until then.
        if wl.state not in ("reserving", "admitted", "pending"):
            return set()
        now_s = env.time_unix_nano / 1e9
        end_s = retry_end_s(check_transitioned_s(env), check.requeue_after_seconds, now_s=now_s)
        holding = wl.state != "pending"
        if holding and wl.conditions.get("Evicted", {}).get("status") != "True":
            wl.retry_at_s = later(wl.retry_at_s, end_s)
            return set()
        was, wl.requeue_at_s = wl.requeue_at_s, later(wl.requeue_at_s, end_s)
        return set() if wl.requeue_at_s == was else {workload_ref(env.workload)}

    def _answer(self, env: pb.Envelope) -> set[ObjectRef]:
        """A check admission answers itself (MultiKueue's): its state goes into the
        Workload's entry. What a check controller wrote there (the watcher's report of it)
        is already in the entry."""
        wl = self._workloads.get(env.workload)
        if wl is None or not env.source.startswith(_ADMISSION_SOURCE):
            return set()
        answer = env.admission_check
        wl.answers[answer.check] = AnsweredCheck(answer.check, answer.state, answer.message)
        # Its reservation requires it, though its quota_reserved may not list it: answered
        # in the same round, it was no longer waited for.
        wl.checks = tuple(sorted({*(wl.checks or ()), answer.check}))
        return {workload_ref(env.workload)}

    def _workload_event(self, key: str, field: str, payload: Any, *, at_s: float) -> set[ObjectRef]:
        namespace, _, name = key.partition("/")
        if not namespace or not name or "/" in name:
            return set()  # a gang outside Kueue: no Kueue Workload to write
        wl = self._workloads.get(key)
        if field == "submitted":
            if wl is None:
                wl = self._workloads[key] = WorkloadRecord(
                    (namespace, payload.queue_name or _DEFAULT_QUEUE)
                )
                reclaimable = manifest_reclaimable(payload.manifest_json)
                if payload.owner.kind in _JOB_KINDS:
                    wl.reclaimable = reclaimable
                if self._fair is not None:  # what its fair sharing run holds (`held`)
                    wl.reclaimed = reclaimed_of(reclaimable)
                    wl.pod_sets = tuple(
                        PodSet(name=ps.name, count=ps.count) for ps in payload.pod_sets
                    )
                self._tally(wl.local_queue).add(wl, 1)
            return {self._lq_ref(wl.local_queue)}
        if wl is None:
            return set()  # submitted before what this cluster remembers, or not Kueue's
        tally = self._tally(wl.local_queue)
        tally.add(wl, -1)
        if field == "deleted":
            del self._workloads[key]
            self._run(key, wl, field, at_s=at_s)
            return {self._lq_ref(wl.local_queue)}
        counts = partial(self.names_check, wl)
        transition(wl, field, payload, at_s=at_s, granular=self._granular, counts=counts)
        requeue_state(wl, field, payload, at_s=at_s, requeuing=self._requeuing, counts=counts)
        tally.add(wl, 1)
        self._run(key, wl, field, at_s=at_s)
        return {workload_ref(key), self._lq_ref(wl.local_queue)}

    # --- statuses -----------------------------------------------------------------------------

    def status_of(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The status `ref` should have now; None when muster knows nothing to write."""
        if ref.kind == "Workload":
            wl = self._workloads.get(f"{ref.namespace}/{ref.name}")
            return None if wl is None else wl.status()
        if ref.kind == "ClusterQueue":
            return self._cluster_queues.get(ref.name)
        if ref.kind == "LocalQueue":
            return self._local_queue_status((ref.namespace, ref.name))
        return None

    def checks_of(self, ref: ObjectRef) -> ChecksWanted | None:
        """What a Workload's check list should hold; None: muster leaves it alone."""
        if ref.kind != "Workload":
            return None
        wl = self._workloads.get(f"{ref.namespace}/{ref.name}")
        return None if wl is None else wl.checks_wanted()

    def refs(self) -> Iterator[ObjectRef]:
        """Every object with a status to write, in a stable order."""
        for key in sorted(self._workloads):
            yield workload_ref(key)
        for name in sorted(self._cluster_queues):
            yield ObjectRef(kind="ClusterQueue", name=name)
        for lq in sorted(self._local_queues):
            yield self._lq_ref(lq)

"""Kueue-shaped statuses of one cluster's Workloads, ClusterQueues and LocalQueues, folded from
muster's events: what `kubectl get workloads`, `kubectl describe workload` and `kubectl get
clusterqueue,localqueue` show. Pure (no I/O, no clock); the watcher's status task (`status`)
feeds it events and desires what changed.

- Workload: conditions QuotaReserved, Admitted, Evicted, Requeued, Finished (reason and
  message as Kueue words them) and `admission` (ClusterQueue, podSetAssignments), from
  `pending`, `quota_reserved`, `admitted`, `evicted`, `eviction_completed`, `requeued`,
  `finished` and `active_changed`: through an eviction as Kueue's workload controller and job
  reconciler write them (Evicted at once; the reservation cleared and Requeued set once the
  pods are gone; BackoffFinished, <Queue>Restarted or Reactivated when it queues again); with
  waitForPodsReady on, PodsReady as Kueue's job reconciler keeps it (False, WaitForStart, from
  the start and whenever it is not admitted; True, Started, once a `running` with its pods
  ready or a `pods_ready` says so while admitted); of a Job's Workload, `reclaimablePods` as
  Kueue's job reconciler keeps it (the Job's finished pods: `submitted`'s manifest, then each
  `reclaimable_pods`, until it finishes); and what its
  check list should hold (`checks_of`: the checks its reservation requires, its last
  eviction), which the writer merges into the stored list (`muster.api.check_states`).
- ClusterQueue: admission's own `queue.status` (counts, flavorsReservation, flavorsUsage,
  Active).
- LocalQueue: counts and flavor sums over its workloads (a workload evicted but not yet
  requeued still reserves quota), Active while its ClusterQueue exists in the cluster; with
  Kueue's `admissionFairSharing` configured, `fairSharing.admissionFairSharingStatus`
  (`consumedResources` as of `lastUpdate`: `core.admission_fair_sharing`, as admission orders
  by it), re-sampled every `usageSamplingInterval` as Kueue's LocalQueue controller does
  (`sample`), and as of the last event that started, resized or ended one of its workloads'
  runs. A run holds the workload's admission less its reclaimable pods (`core.reclaim`, with
  Kueue's gate ReclaimablePods on), from the event that told them, as admission's run does.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal

from muster.api.check_states import AnsweredCheck, ChecksWanted
from muster.api.check_states import format_time as format_metav1_time
from muster.api.encode import is_byte_resource
from muster.api.model import AdmissionFairSharingConfig, PodSet, PodSetAssignment, RequeuingStrategy
from muster.api.quantity import QuantityError, format_quantity, parse_quantity
from muster.api.wellknown import LOCAL_CLUSTER
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.admission_fair_sharing import AdmissionUsage
from muster.core.conditions import (
    ADMISSION_CHECK,
    ADMITTED_MESSAGE,
    DEACTIVATED,
    DEACTIVATED_MESSAGE,
    NOT_READY_MESSAGE,
    PENDING_EVALUATION,
    PENDING_EVALUATION_MESSAGE,
    PODS_READY_TIMEOUT,
    QUOTA_RESERVED,
    REACTIVATED,
    READY_MESSAGE,
    RECOVERED,
    STARTED,
    STILL_STOPPED,
    WAIT_FOR_RECOVERY,
    WAIT_FOR_RECOVERY_MESSAGE,
    WAIT_FOR_START,
    Said,
    condition_message,
    deactivated,
    deactivated_reason,
    is_deactivation,
    not_admitted,
    pods_gone,
    previously,
    quota_reserved_message,
    requeued_when_queued,
    restarted,
)
from muster.core.config_owners import ConfigOwners
from muster.core.reclaim import NONE, reclaimed_usage
from muster.core.requeue_state import (
    backoff_end_s,
    count_after_eviction,
    later,
    reactivated_retry_end_s,
    retry_end_s,
)
from muster.payloads import PayloadError, applied_document, check_transitioned_s

# The events whose payloads change a Workload's status (the status task follows these).
WORKLOAD_EVENTS = (
    "submitted",
    "pending",
    "quota_reserved",
    "admitted",
    "evicted",
    "requeued",
    "finished",
    "deleted",
)
# The watcher's reports of a workload's readiness (followed only with waitForPodsReady on).
READINESS_EVENTS = ("running", "pods_ready")
# spec.active set (kueuectl, the gateway, the watcher): a pending workload deactivated is told
# by nothing else (admission takes it off its queue without a decision to publish).
ACTIVE_CHANGED: Final = "active_changed"
# The binder's word that an evicted workload's pods are gone: a deactivated one reserves
# nothing from then on.
EVICTION_COMPLETED: Final = "eviction_completed"
# The watcher's word that a workload's reclaimable pods changed: written on a Job's Workload.
RECLAIMABLE_PODS: Final = "reclaimable_pods"
# Conditions in the order `kubectl describe` lists them.
_CONDITION_ORDER = ("QuotaReserved", "Admitted", "PodsReady", "Evicted", "Requeued", "Finished")
_DEFAULT_QUEUE = "default"  # a workload naming no LocalQueue is in its namespace's "default"
_ADMISSION_SOURCE = "admission/"  # Envelope.source of admission's decisions

# "inactive": deactivated (a check Rejected it, ...), it reserves nothing and waits for nothing.
State = Literal["pending", "reserving", "admitted", "finished", "inactive"]
DEACTIVATED_BY_ADMISSION = "InactiveWorkload"  # admission's eviction reason for a deactivation
FlavorResource = tuple[str, str]  # (flavor, resource)
# Admitted False while it holds no quota, next to any QuotaReserved False (Kueue's
# UnadmittedWorkloadsObservability, on by default: `granular`).
NO_RESERVATION: Final = not_admitted(reserved=False)


def _milli(text: str) -> int:
    try:
        return int(parse_quantity(text))
    except QuantityError:
        return 0  # admission writes quantities it parsed itself; never seen


def _quantity(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=is_byte_resource(resource))


def _condition(type_: str, status: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": condition_message(message),
    }


def _flavor_list(sums: Mapping[FlavorResource, int]) -> list[dict[str, Any]]:
    """Kueue's `[{name: flavor, resources: [{name, total}]}]`, sorted by flavor and resource."""
    flavors: dict[str, list[dict[str, Any]]] = {}
    for (flavor, resource), milli in sorted(sums.items()):
        entry = {"name": resource, "total": _quantity(resource, milli)}
        flavors.setdefault(flavor, []).append(entry)
    return [{"name": name, "resources": resources} for name, resources in flavors.items()]


# The owners whose Kueue Workload muster created and keeps status.reclaimablePods of.
_JOB_KINDS = frozenset({"Job", "JobSet"})


class _Workload:
    """What the statuses need of one Kueue workload."""

    __slots__ = (
        "admission",
        "answers",
        "assigned",
        "checks",
        "cluster_name",
        "conditions",
        "evicted_at_s",
        "local_queue",
        "pod_sets",
        "reclaimable",
        "reclaimed",
        "requeue_at_s",
        "requeue_count",
        "retry_at_s",
        "retry_ends",
        "state",
        "usage",
    )

    def __init__(self, local_queue: tuple[str, str]) -> None:
        self.local_queue = local_queue  # (namespace, name)
        self.state: State = "pending"
        self.conditions: dict[str, dict[str, str]] = {}
        self.admission: dict[str, Any] | None = None
        self.usage: Counter[FlavorResource] = Counter()  # of the admission, per flavor
        self.assigned: tuple[PodSetAssignment, ...] = ()  # the admission, per podset
        # Its podsets' counts as submitted, and its reclaimable pods as last told (podset ->
        # count): what its run in its LocalQueue's fair sharing usage holds (`held`).
        self.pod_sets: tuple[PodSet, ...] = ()
        self.reclaimed: Mapping[str, int] = NONE
        self.checks: tuple[str, ...] | None = None  # None: no reservation ever required one
        self.evicted_at_s = 0.0  # when last evicted (event time)
        self.answers: dict[str, AnsweredCheck] = {}  # of checks admission answers (MultiKueue)
        self.cluster_name = ""  # the worker cluster MultiKueue dispatched it to
        # status.requeueState: PodsReadyTimeout evictions since it was last deactivated, and
        # from its eviction until it queues again, when it may (as admission counts and waits:
        # core/lifecycle.py); `retry_at_s`, a check's Retry's end, until its eviction.
        self.requeue_count = 0
        self.requeue_at_s: float | None = None
        self.retry_at_s: float | None = None
        # Of its checks told Retry since its last eviction without quota to decide on, when
        # each asks it to queue again: requeueAt once reactivated (the engine's `retry_ends`).
        self.retry_ends: dict[str, float] = {}
        # status.reclaimablePods, of a Job's or JobSet's Workload only (None): a bare
        # Workload's is its owner's to write, and admission reads it from there.
        self.reclaimable: list[dict[str, Any]] | None = None

    def checks_wanted(self) -> ChecksWanted | None:
        if self.checks is None:
            return None
        answers = tuple(self.answers[name] for name in sorted(self.answers))
        return ChecksWanted(names=self.checks, evicted_at_s=self.evicted_at_s, answers=answers)

    def set(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.conditions[type_] = _condition(type_, status, reason, message)

    def say(self, conditions: Iterable[Said]) -> None:
        for said in conditions:
            self.set(*said)

    def admit(self, admission: pb.Admission) -> None:
        assignments = []
        assigned = []
        self.usage = Counter()
        for ps in admission.pod_set_assignments:
            flavors = dict(sorted(ps.flavors.items()))
            assignment: dict[str, Any] = {"name": ps.name, "flavors": flavors}
            if ps.resource_usage:
                assignment["resourceUsage"] = dict(sorted(ps.resource_usage.items()))
            assignment["count"] = ps.count
            assignments.append(assignment)
            usage = {resource: _milli(text) for resource, text in ps.resource_usage.items()}
            for resource, milli in usage.items():
                self.usage[(ps.flavors.get(resource, ""), resource)] += milli
            assigned.append(
                PodSetAssignment(
                    name=ps.name, flavors=flavors, count=ps.count, resource_usage=usage
                )
            )
        self.assigned = tuple(assigned)
        self.admission = {
            "clusterQueue": admission.cluster_queue,
            "podSetAssignments": assignments,
        }

    def unadmit(self) -> None:
        self.admission = None
        self.usage = Counter()
        self.assigned = ()

    def held(self, *, reclaimable: bool) -> Mapping[FlavorResource, int]:
        """What its admission holds less its reclaimable pods (with Kueue's gate
        ReclaimablePods on), as admission's run of it holds (`core.reclaim`)."""
        if not reclaimable or not self.reclaimed:
            return self.usage
        return reclaimed_usage(self.assigned, self.pod_sets, self.reclaimed)

    def status(self) -> dict[str, Any]:
        conditions = [self.conditions[t] for t in _CONDITION_ORDER if t in self.conditions]
        out: dict[str, Any] = {"conditions": conditions}
        if self.admission is not None:
            out["admission"] = self.admission
        if self.cluster_name:
            out["clusterName"] = self.cluster_name
        if self.requeue_count or self.requeue_at_s is not None:
            # Kueue's metav1.Time: whole seconds, the instant admission waits for. requeueAt
            # None once it queues again: the writer's merge patch removes it (and requeueState
            # with it when no count is left: a check's Retry counts nothing).
            at = None if self.requeue_at_s is None else format_metav1_time(self.requeue_at_s)
            state: dict[str, Any] = {"requeueAt": at}
            if self.requeue_count:
                state["count"] = self.requeue_count
            out["requeueState"] = state
        if self.reclaimable:  # none: the writer's merge patch removes a list it wrote before
            out["reclaimablePods"] = self.reclaimable
        return out


class _Tally:
    """A LocalQueue's sums over its live workloads."""

    __slots__ = ("counts", "reserved", "used")

    def __init__(self) -> None:
        self.counts: Counter[State] = Counter()
        self.reserved: Counter[FlavorResource] = Counter()
        self.used: Counter[FlavorResource] = Counter()

    def add(self, wl: _Workload, sign: int) -> None:
        self.counts[wl.state] += sign
        if wl.state in ("reserving", "admitted"):
            self.reserved.update({k: sign * v for k, v in wl.usage.items()})
        if wl.state == "admitted":
            self.used.update({k: sign * v for k, v in wl.usage.items()})


class StatusBook:
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
        # v1beta1 calls a LocalQueue's flavorsUsage `flavorUsage`.
        self._lq_usage_field = "flavorUsage" if kueue_version == "v1beta1" else "flavorsUsage"
        self._workloads: dict[str, _Workload] = {}
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._local_queues: dict[tuple[str, str], str] = {}  # (ns, name) → its ClusterQueue
        self._cluster_queues: dict[str, dict[str, Any] | None] = {}  # name → last status
        # A worker's queues of the same names: not ours. Its feed is this cluster's config
        # events only, so its MultiKueueClusters are the only ones it reads: they count.
        self._config_owners = ConfigOwners(manager=cluster or LOCAL_CLUSTER)
        # Admission fair sharing (Kueue's Configuration): each LocalQueue's usage, and when an
        # event last started or ended one of its runs (its lastUpdate).
        self._fair = fair
        self._reclaimable_pods = reclaimable_pods  # Kueue's gate ReclaimablePods
        self._usage = AdmissionUsage()
        self._usage_at: dict[tuple[str, str], float] = {}

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
                _waiting_for_start(wl)
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
        return {_workload_ref(env.workload)}

    def _reclaimable(self, env: pb.Envelope) -> set[ObjectRef]:
        """A workload's reclaimable pods changed: its run in its LocalQueue's fair sharing
        usage holds what is left from the event's time, as admission's does. Of a Job's
        Workload (a Job's finished pods, a JobSet's succeeded Jobs), reclaimablePods follows,
        the whole list, as Kueue's job reconciler writes it; no longer once the Workload
        finished (the reconciler stops at a finished one)."""
        wl = self._workloads.get(env.workload)
        if wl is None or wl.state == "finished":
            return set()
        pods = _reclaimable_list((p.pod_set, p.count) for p in env.reclaimable_pods.pods)
        wl.reclaimed = _reclaimed(pods)
        refs = self._resized(env.workload, wl, at_s=env.time_unix_nano / 1e9)
        if wl.reclaimable is not None:
            wl.reclaimable = pods
            refs.add(_workload_ref(env.workload))
        return refs

    def _resized(self, key: str, wl: _Workload, *, at_s: float) -> set[ObjectRef]:
        """Admission fair sharing: `wl`'s run holds what it holds now from `at_s` (a no-op
        when it runs nowhere or holds that already)."""
        fair = self._fair
        if fair is None or wl.state not in ("reserving", "admitted"):
            return set()
        held = wl.held(reclaimable=self._reclaimable_pods)
        self._usage.resize(key, held, at_s=at_s, config=fair)
        self._usage_at[wl.local_queue] = max(at_s, self._usage_at.get(wl.local_queue, at_s))
        return {self._lq_ref(wl.local_queue)}

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
        return {_workload_ref(env.workload), self._lq_ref(wl.local_queue)}

    def _retry(self, env: pb.Envelope) -> set[ObjectRef]:
        """A check's Retry with requeueAfterSeconds while the workload holds quota: the
        requeueAt it asks for, counted from when the check entered Retry (its entry's
        lastTransitionTime, as admission counts it), and only ever later
        (`core.requeue_state.later`). Before its eviction it is kept for the eviction it
        causes (`_requeue_state`); once evicted (its pods stopping after a PodsReady timeout,
        say, or gone while it waits for its back-off's end), requeueAt moves on at once, as
        admission's wait does (Kueue's NeedsRequeueAtUpdate); and so it does once it is
        queued again, waiting for quota (admission holds it out of its queue until then)."""
        wl = self._workloads.get(env.workload)
        check = env.admission_check
        if wl is not None:
            _keep_retry_end(wl, check, check_transitioned_s(env))
        if wl is None or check.state != "Retry":
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
        return set() if wl.requeue_at_s == was else {_workload_ref(env.workload)}

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
        return {_workload_ref(env.workload)}

    def _workload_event(self, key: str, field: str, payload: Any, *, at_s: float) -> set[ObjectRef]:
        namespace, _, name = key.partition("/")
        if not namespace or not name or "/" in name:
            return set()  # a gang outside Kueue: no Kueue Workload to write
        wl = self._workloads.get(key)
        if field == "submitted":
            if wl is None:
                wl = self._workloads[key] = _Workload(
                    (namespace, payload.queue_name or _DEFAULT_QUEUE)
                )
                reclaimable = _manifest_reclaimable(payload.manifest_json)
                if payload.owner.kind in _JOB_KINDS:
                    wl.reclaimable = reclaimable
                if self._fair is not None:  # what its fair sharing run holds (`held`)
                    wl.reclaimed = _reclaimed(reclaimable)
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
        _transition(wl, field, payload, at_s=at_s, granular=self._granular)
        _requeue_state(wl, field, payload, at_s=at_s, requeuing=self._requeuing)
        tally.add(wl, 1)
        self._run(key, wl, field, at_s=at_s)
        return {_workload_ref(key), self._lq_ref(wl.local_queue)}

    def _run(self, key: str, wl: _Workload, field: str, *, at_s: float) -> None:
        """Admission fair sharing: a run of `wl` starts at its quota_reserved (or admitted)
        and ends when its quota is released, at the events' times, as admission counts it."""
        fair = self._fair
        if fair is None:
            return
        book, local_queue = self._usage, "/".join(wl.local_queue)
        if field in ("quota_reserved", "admitted") and wl.state in ("reserving", "admitted"):
            held = wl.held(reclaimable=self._reclaimable_pods)
            book.start(key, local_queue, held, at_s=at_s, config=fair)
        elif field in (EVICTION_COMPLETED, "finished", "deleted"):
            book.stop(key, at_s=at_s, config=fair)
            if field != EVICTION_COMPLETED:
                book.retire(key, config=fair)
        else:
            return
        self._usage_at[wl.local_queue] = max(at_s, self._usage_at.get(wl.local_queue, at_s))

    def sample(self, now_s: float) -> set[ObjectRef]:
        """Re-sample the LocalQueues' admission fair sharing status at the last tick of the
        `usageSamplingInterval` grid at or before `now_s`; the LocalQueues it changed.

        Kueue's LocalQueue controller (pkg/controller/core/localqueue_controller.go, Reconcile
        and reconcileConsumedUsage) writes every LocalQueue whose ClusterQueue is active once
        per interval: consumedResources decayed to now, lastUpdate now. Ticks on one grid
        bound the writes to one per LocalQueue per interval however often this is called.
        Differs from Kueue: a LocalQueue that has consumed nothing, and showed nothing, keeps
        its lastUpdate (its status would say nothing new; thousands of idle queues would
        otherwise cost a write each per interval)."""
        fair = self._fair
        if fair is None or fair.usage_sampling_interval_s <= 0:
            return set()
        interval = fair.usage_sampling_interval_s
        tick = math.floor(now_s / interval) * interval
        refs: set[ObjectRef] = set()
        for lq, cluster_queue in sorted(self._local_queues.items()):
            was = self._usage_at.get(lq, 0.0)
            if cluster_queue not in self._cluster_queues or was >= tick:
                continue  # Kueue: not reconciled without its ClusterQueue; or sampled already
            key = "/".join(lq)
            shown = self._usage.consumed(key, now_s=was, config=fair)
            if not shown and not self._usage.consumed(key, now_s=tick, config=fair):
                continue
            self._usage_at[lq] = tick
            refs.add(self._lq_ref(lq))
        return refs

    def _fair_sharing_status(self, lq: tuple[str, str]) -> dict[str, Any]:
        """Kueue's LocalQueue `fairSharing.admissionFairSharingStatus`, as of the last event
        that changed its usage or the last sample, whichever is later (none yet: empty,
        lastUpdate 0)."""
        assert self._fair is not None
        at_s = self._usage_at.get(lq, 0.0)
        consumed = self._usage.consumed("/".join(lq), now_s=at_s, config=self._fair)
        return {
            "admissionFairSharingStatus": {
                "consumedResources": {
                    name: _quantity(name, round(value * 1000)) for name, value in consumed.items()
                },
                "lastUpdate": format_metav1_time(at_s),
            }
        }

    def _queue_status(self, status: pb.ClusterQueueStatus) -> set[ObjectRef]:
        self._cluster_queues[status.name] = cluster_queue_status(status)
        return {ObjectRef(kind="ClusterQueue", name=status.name)}

    def _config(self, env: pb.Envelope) -> set[ObjectRef]:
        applied = env.WhichOneof("payload") == "config_applied"
        kind, name = (
            (env.config_applied.kind, env.config_applied.name)
            if applied
            else (env.config_deleted.kind, env.config_deleted.name)
        )
        if self._config_owners.admit(kind, name, env.cluster, deleted=not applied):
            return set()  # admission refuses it too
        if kind == "LocalQueue":
            lq = _split(name)
            if not applied:
                self._local_queues.pop(lq, None)
                self._usage_at.pop(lq, None)  # Kueue drops its usage with it
                self._usage.forget("/".join(kept) for kept in self._local_queues)
                return set()
            self._usage_at.setdefault(lq, env.time_unix_nano / 1e9)  # Kueue: lastUpdate, now
            try:
                manifest = applied_document(env.config_applied)
            except PayloadError:  # admission dead-letters it; no ClusterQueue known here
                manifest = {}
            self._local_queues[lq] = str((manifest.get("spec") or {}).get("clusterQueue") or "")
            return {self._lq_ref(lq)}
        if kind == "ClusterQueue":
            if applied:
                self._cluster_queues.setdefault(name, None)
            else:
                self._cluster_queues.pop(name, None)
            return {self._lq_ref(lq) for lq, cq in self._local_queues.items() if cq == name}
        return set()

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
            yield _workload_ref(key)
        for name in sorted(self._cluster_queues):
            yield ObjectRef(kind="ClusterQueue", name=name)
        for lq in sorted(self._local_queues):
            yield self._lq_ref(lq)

    def _local_queue_status(self, lq: tuple[str, str]) -> dict[str, Any] | None:
        if lq not in self._local_queues:
            return None  # not in this cluster (or deleted)
        tally = self._tallies.get(lq) or _Tally()
        active = self._local_queues[lq] in self._cluster_queues
        fair = {"fairSharing": self._fair_sharing_status(lq)} if self._fair is not None else {}
        return fair | {
            "pendingWorkloads": tally.counts["pending"],
            "reservingWorkloads": tally.counts["reserving"] + tally.counts["admitted"],
            "admittedWorkloads": tally.counts["admitted"],
            "flavorsReservation": _flavor_list(+tally.reserved),
            self._lq_usage_field: _flavor_list(+tally.used),
            "conditions": [
                _condition("Active", True, "Ready", "Can submit new workloads to localQueue")
                if active
                else _condition(
                    "Active",
                    False,
                    "ClusterQueueDoesNotExist",
                    "Can't submit new workloads to clusterQueue",
                )
            ],
        }

    def _tally(self, lq: tuple[str, str]) -> _Tally:
        return self._tallies.setdefault(lq, _Tally())

    @staticmethod
    def _lq_ref(lq: tuple[str, str]) -> ObjectRef:
        return ObjectRef(kind="LocalQueue", namespace=lq[0], name=lq[1])


def _reclaimable_list(pods: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """Kueue's `[{name: podset, count}]`, of the podsets with pods to reclaim, sorted."""
    return [{"name": name, "count": count} for name, count in sorted(pods) if count > 0]


def _reclaimed(pods: list[dict[str, Any]]) -> Mapping[str, int]:
    """podset -> its reclaimable pods, of a `_reclaimable_list` (the shared empty map)."""
    return {str(p["name"]): int(p["count"]) for p in pods} or NONE


def _manifest_reclaimable(manifest_json: str) -> list[dict[str, Any]]:
    """The reclaimablePods a Job's Workload was submitted with (its finished pods when the
    watcher first saw it); none when the manifest says nothing readable of them."""
    if '"reclaimablePods"' not in manifest_json:  # the usual case, without a parse
        return []
    try:
        status = json.loads(manifest_json).get("status")
        pods = [(str(p["name"]), int(p["count"])) for p in status["reclaimablePods"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []  # the watcher wrote it from a Job it validated; never seen
    return _reclaimable_list(pods)


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _workload_ref(key: str) -> ObjectRef:
    namespace, name = _split(key)
    return ObjectRef(kind="Workload", namespace=namespace, name=name)


def _transition(wl: _Workload, field: str, payload: Any, *, at_s: float, granular: bool) -> None:
    """Move `wl` on for one admission, eviction or end event, as Kueue words the conditions."""
    if field == "pending":
        # Kueue's reasons as admission decided them (granular since Kueue v0.19).
        reason = payload.reason or "Pending"
        wl.state = "pending"
        wl.unadmit()
        wl.set("QuotaReserved", False, reason, payload.message)
        if granular:
            wl.say([NO_RESERVATION])
        if reason not in STILL_STOPPED:
            _restarted(wl)
    elif field == "quota_reserved" and wl.state == "admitted":
        pass  # stored after its admitted (docs/events.md, "Order"): said already
    elif field in ("quota_reserved", "admitted"):
        _reserved(wl, field, payload, granular=granular)
    elif field == "evicted":
        _evicted(wl, payload, at_s=at_s, granular=granular)
    elif field == "eviction_completed":
        if wl.state == "reserving" and wl.conditions.get("Evicted", {}).get("status") == "True":
            _stopped(wl, granular=granular)
    elif field == "requeued":
        _requeued(wl, payload, granular=granular)
    elif field == "finished":
        wl.state = "finished"
        succeeded = bool(payload.succeeded)
        wl.set("Finished", True, "Succeeded" if succeeded else "Failed", payload.message)


def _requeue_state(
    wl: _Workload, field: str, payload: Any, *, at_s: float, requeuing: RequeuingStrategy
) -> None:
    """Kueue's status.requeueState by `core.requeue_state`'s rules, the ones admission's
    ledger and engine count and wait by: each PodsReadyTimeout eviction counts one and ends
    its back-off from the eviction; a check's Retry eviction ends at the Retry's end
    (`_retry`); requeueAt only ever moves later, and is cleared when it queues again; a
    deactivation clears both (Kueue's workload controller, which starts a reactivated
    workload's count over)."""
    if field == "evicted":
        wl.requeue_count = count_after_eviction(
            wl.requeue_count, payload.reason, deactivated=wl.state == "inactive"
        )
        if payload.reason == PODS_READY_TIMEOUT:
            end_s = backoff_end_s(wl.requeue_count, at_s, requeuing)
            wl.requeue_at_s = later(wl.requeue_at_s, end_s)
        elif payload.reason == ADMISSION_CHECK:
            wl.requeue_at_s = later(wl.requeue_at_s, wl.retry_at_s)
    deactivated = field == "evicted" and is_deactivation(payload.reason)
    if wl.state == "inactive" or deactivated:  # at once, though its pods may still run
        wl.requeue_count, wl.requeue_at_s, wl.retry_at_s = 0, None, None
    elif field == "requeued" and payload.reason == REACTIVATED:
        # Kueue's status holds only its ClusterQueue's checks: each Retry end counts.
        wl.requeue_at_s = reactivated_retry_end_s(wl.retry_ends, lambda _: True, now_s=at_s)
    elif field == "requeued":
        wl.requeue_at_s = None
    if field in ("evicted", "requeued"):
        wl.retry_at_s = None  # a Retry before the eviction counts only for that eviction
    if field in ("evicted", "quota_reserved", "admitted"):
        wl.retry_ends = {}  # checks reset, or the told ones spent by a reservation


def _keep_retry_end(wl: _Workload, check: pb.AdmissionCheckUpdated, since_s: float) -> None:
    """A check told while `wl` holds no quota to decide on (or its pods stop): a Retry's end
    counts at its reactivation for as long as the check stays in Retry (GetMaxRetryTime)."""
    evicted = wl.conditions.get("Evicted", {}).get("status") == "True"
    if wl.state in ("reserving", "admitted") and not evicted:
        return
    wl.retry_ends.pop(check.check, None)
    if check.state == "Retry":
        end_s = retry_end_s(since_s, check.requeue_after_seconds, now_s=since_s)
        if end_s is not None:
            wl.retry_ends[check.check] = end_s


def _reserved(wl: _Workload, field: str, payload: Any, *, granular: bool) -> None:
    cq = payload.admission.cluster_queue
    _restarted(wl)  # reserved again: its queue runs
    wl.admit(payload.admission)
    wl.set("QuotaReserved", True, "QuotaReserved", quota_reserved_message(cq))
    evicted = wl.conditions.get("Evicted")
    if evicted is not None and evicted["status"] == "True":
        wl.set("Evicted", False, "QuotaReserved", previously(evicted["message"]))
    if field == "admitted":
        wl.state = "admitted"
        wl.set("Admitted", True, "Admitted", ADMITTED_MESSAGE)
    else:
        wl.state = "reserving"
        checks = tuple(sorted(payload.admission_checks))
        if checks or wl.checks is not None:
            wl.checks = checks
        if checks and granular:  # Kueue's SyncAdmittedCondition: checks not all Ready yet
            wl.say([not_admitted(reserved=True)])


def _evicted(wl: _Workload, payload: Any, *, at_s: float, granular: bool) -> None:
    """Evicted True (Kueue's workload controller). QuotaReserved and Admitted stay as they
    were while its pods stop (`_stopped`), except for a deactivation admission carried out
    at once (its quota given back: nothing ran, or the back-off limit was reached)."""
    wl.evicted_at_s = at_s
    wl.answers.clear()  # reset with the others; the next reservation is answered anew
    reason = payload.reason or "Evicted"
    if reason == DEACTIVATED_BY_ADMISSION:
        evicted = wl.conditions.get("Evicted", {})
        reason = deactivated_reason(
            evicted.get("reason", "") if evicted.get("status") == "True" else ""
        )
        wl.set("Evicted", True, reason, payload.message)
        _inactive(wl, granular=granular)
        return
    wl.set("Evicted", True, reason, payload.message)
    wl.state = "reserving"  # the quota stays reserved until the pods are gone


def _stopped(wl: _Workload, *, granular: bool) -> None:
    """Its pods are gone (Kueue's job reconciler, once the job is not active): the
    reservation is cleared, Requeued says whether it queues at once, with the eviction's
    reason and message; a deactivated one stays out of its queue."""
    evicted = wl.conditions["Evicted"]
    if is_deactivation(evicted["reason"]):
        _inactive(wl, granular=granular)
        return
    wl.state = "pending"
    wl.unadmit()
    pending = bool(wl.checks) and not granular  # said only with the classic reasons
    wl.say(
        pods_gone(evicted["reason"], evicted["message"], granular=granular, checks_pending=pending)
    )


def _requeued(wl: _Workload, payload: Any, *, granular: bool) -> None:
    """Admission queued it again. Kueue's workload controller says why: reactivated, its
    back-off over; a workload evicted by a stopped queue stays Requeued False until the
    queue runs again (`_restarted`)."""
    if wl.state == "reserving" and wl.conditions.get("Evicted", {}).get("status") == "True":
        _stopped(wl, granular=granular)  # no eviction_completed came (nothing ran)
    wl.state = "pending"
    wl.unadmit()
    wl.cluster_name = ""
    if granular:  # as Kueue's workload controller resets it for the scheduler
        pending = (QUOTA_RESERVED, False, PENDING_EVALUATION, PENDING_EVALUATION_MESSAGE)
        wl.say([pending, NO_RESERVATION])
    was = wl.conditions.get("Requeued", {})
    words = requeued_when_queued(
        was.get("status", ""), was.get("reason", ""), was.get("message", ""), payload.reason
    )
    if words is not None:
        wl.set("Requeued", True, *words)


def _restarted(wl: _Workload) -> None:
    """Kueue's workload controller: Requeued True once the stopped queue that evicted the
    workload runs again; muster sees it as a pending reason other than a stop's, or a
    reservation."""
    was = wl.conditions.get("Requeued", {})
    words = restarted(was.get("status", ""), was.get("reason", ""))
    if words is not None:
        wl.set("Requeued", True, *words)


def _waiting_for_start(wl: _Workload) -> None:
    """PodsReady False, WaitForStart, unless it is admitted with its pods ready: a workload
    not admitted (yet, or no more: evicted, requeued) waits for its pods to start anew. A
    finished one keeps what it had (Kueue stops looking at a finished job's readiness)."""
    ready = wl.conditions.get("PodsReady", {}).get("status") == "True"
    if wl.state == "finished" or (wl.state == "admitted" and ready):
        return
    wl.set("PodsReady", False, WAIT_FOR_START, NOT_READY_MESSAGE)


def _inactive(wl: _Workload, *, granular: bool) -> None:
    """Deactivated, its quota given back (`core.conditions.deactivated`)."""
    evicted = wl.conditions["Evicted"]
    wl.state = "inactive"
    wl.unadmit()
    pending = bool(wl.checks) and not granular
    wl.say(
        deactivated(
            evicted["reason"], evicted["message"], granular=granular, checks_pending=pending
        )
    )


def cluster_queue_status(status: pb.ClusterQueueStatus) -> dict[str, Any]:
    """A ClusterQueue's Kueue status from admission's `queue.status`."""
    reserved: dict[str, list[dict[str, str]]] = {}
    used: dict[str, list[dict[str, str]]] = {}
    for flavor in status.flavors:
        for r in flavor.resources:
            over = max(0, _milli(r.used or "0") - _milli(r.nominal or "0"))
            reserved.setdefault(flavor.name, []).append(
                {"name": r.name, "total": r.reserved or "0", "borrowed": r.borrowed or "0"}
            )
            used.setdefault(flavor.name, []).append(
                {"name": r.name, "total": r.used or "0", "borrowed": _quantity(r.name, over)}
            )
    active = (
        _condition("Active", True, "Ready", "Can admit new workloads")
        if status.active
        else _condition(
            "Active",
            False,
            status.inactive_reason or "Inactive",
            f"Can't admit new workloads: {status.inactive_reason or 'inactive'}",
        )
    )
    return {
        "pendingWorkloads": status.pending_workloads,
        "reservingWorkloads": status.reserving_workloads,
        "admittedWorkloads": status.admitted_workloads,
        "flavorsReservation": [{"name": f, "resources": rs} for f, rs in reserved.items()],
        "flavorsUsage": [{"name": f, "resources": rs} for f, rs in used.items()],
        "conditions": [active],
    }

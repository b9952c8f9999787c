"""The queues' side of a cluster's Kueue statuses: ClusterQueues as admission reports them,
LocalQueues' counts and flavor sums over their workloads, and admission fair sharing's usage of
each LocalQueue (its runs and its samples). `book.StatusBook` is built on it."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from muster.api.check_states import format_time as format_metav1_time
from muster.api.model import AdmissionFairSharingConfig, AdmissionMode, ClusterQueue
from muster.api.wellknown import LOCAL_CLUSTER
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.admission_fair_sharing import AdmissionUsage, Amounts
from muster.core.config_owners import ConfigOwners
from muster.payloads import PayloadError, applied_document, applied_object
from muster.watcher.kueue_status.cluster_queue import cluster_queue_status
from muster.watcher.kueue_status.fields import (
    FlavorResource,
    flavor_list,
    kueue_condition,
    quantity_of,
)
from muster.watcher.kueue_status.followed import EVICTION_COMPLETED
from muster.watcher.kueue_status.workload import State, WorkloadRecord, split_key


class _Tally:
    """A LocalQueue's sums over its live workloads."""

    __slots__ = ("counts", "reserved", "used")

    def __init__(self) -> None:
        self.counts: Counter[State] = Counter()
        self.reserved: Counter[FlavorResource] = Counter()
        self.used: Counter[FlavorResource] = Counter()

    def add(self, wl: WorkloadRecord, sign: int) -> None:
        self.counts[wl.state] += sign
        if wl.state in ("reserving", "admitted"):
            self.reserved.update({k: sign * v for k, v in wl.usage.items()})
        if wl.state == "admitted":
            self.used.update({k: sign * v for k, v in wl.usage.items()})


class QueueBook:
    """The statuses of one cluster's ClusterQueues and LocalQueues, and the LocalQueues' admission
    fair sharing usage, as the events so far make them."""

    def __init__(
        self,
        *,
        kueue_version: str,
        cluster: str,
        fair: AdmissionFairSharingConfig | None,
        reclaimable_pods: bool,
    ) -> None:
        # v1beta1 calls a LocalQueue's flavorsUsage `flavorUsage`.
        self._lq_usage_field = "flavorUsage" if kueue_version == "v1beta1" else "flavorsUsage"
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._local_queues: dict[tuple[str, str], str] = {}  # (ns, name) → its ClusterQueue
        self._cluster_queues: dict[str, dict[str, Any] | None] = {}  # name → last status
        # name → the admission checks it names (either spelling), as last applied.
        self._cluster_queue_checks: dict[str, frozenset[str]] = {}
        # A worker's queues of the same names: not ours. Its feed is this cluster's config
        # events only, so its MultiKueueClusters are the only ones it reads: they count.
        self._config_owners = ConfigOwners(manager=cluster or LOCAL_CLUSTER)
        # Admission fair sharing (Kueue's Configuration): each LocalQueue's usage, what its
        # status shows (a sample: lastUpdate, consumedResources), when its next sample is due,
        # the workloads whose entry penalty is not settled yet (reserved, not admitted), and
        # the ClusterQueues that order by usage (only their workloads are priced and settled).
        self._fair = fair
        self._reclaimable_pods = reclaimable_pods  # Kueue's gate ReclaimablePods
        self._usage = AdmissionUsage()
        self._shown: dict[tuple[str, str], tuple[float, Amounts]] = {}
        self._due: dict[tuple[str, str], float] = {}
        self._unsettled: dict[tuple[str, str], set[str]] = {}
        self._usage_based: set[str] = set()
        # Kueue reconciles no usage of a stopped LocalQueue or an inactive ClusterQueue's.
        self._stopped: set[tuple[str, str]] = set()
        self._inactive: set[str] = set()  # ClusterQueues, as admission's queue.status says

    def _resized(self, key: str, wl: WorkloadRecord, *, at_s: float) -> set[ObjectRef]:
        """Admission fair sharing: `wl`'s run holds what it holds now from `at_s` (a no-op
        when it runs nowhere or holds that already); its LocalQueue when a sample was taken."""
        fair = self._fair
        if fair is None or wl.state not in ("reserving", "admitted"):
            return set()
        sampled = self._sample_before(
            wl.local_queue, at_s, now=bool(self._unsettled.get(wl.local_queue))
        )
        held = wl.held(reclaimable=self._reclaimable_pods)
        self._usage.resize(key, held, at_s=at_s, config=fair)
        return {self._lq_ref(wl.local_queue)} if sampled else set()

    def _run(self, key: str, wl: WorkloadRecord, field: str, *, at_s: float) -> None:
        """Admission fair sharing: a run of `wl` starts at its quota_reserved (or admitted)
        and ends when its quota is released, at the events' times, as admission counts it.

        Its entry penalty is unsettled from a quota_reserved that waits for admission checks
        until its admitted (or its end); Kueue's scheduler pushes it at the reservation, its
        workload controller settles it on the transition into Admitted (updateAfsConsumedUsage,
        which restarts the LocalQueue's decay clock: its next sample is due an interval
        later) or drops it (reconcileAfsPenaltiesOnUpdate: finished, deleted, deactivated).
        Only in a ClusterQueue that orders by usage; elsewhere no penalty is priced. Priced
        on its full requests, however few pods a partial admission gave it (Kueue's
        updateEntryPenalty on SumTotalRequests), as admission prices it."""
        fair = self._fair
        if fair is None:
            return
        lq = wl.local_queue
        cluster_queue = (wl.admission or {}).get("clusterQueue") or self._local_queues.get(lq)
        usage_based = cluster_queue in self._usage_based
        pushed = field == "quota_reserved" and usage_based and wl.state == "reserving"
        unsettled = self._unsettled.setdefault(lq, set())
        settles = field == "admitted" and usage_based and wl.state == "admitted"
        others = unsettled - {key} if settles else unsettled
        self._sample_before(lq, at_s, now=pushed or bool(others))
        book, local_queue = self._usage, "/".join(lq)
        if field in ("quota_reserved", "admitted") and wl.state in ("reserving", "admitted"):
            gate = self._reclaimable_pods
            book.start(
                key,
                local_queue,
                wl.held(reclaimable=gate),
                at_s=at_s,
                config=fair,
                penalized=usage_based,
                requested=wl.requested(reclaimable=gate),
            )
        elif field in (EVICTION_COMPLETED, "finished", "deleted"):
            book.stop(key, at_s=at_s, config=fair)
            if field != EVICTION_COMPLETED:
                book.retire(key, config=fair)
        if pushed:
            unsettled.add(key)
        elif settles:
            unsettled.discard(key)
            self._due[lq] = max(self._due.get(lq, at_s), at_s + fair.usage_sampling_interval_s)
        elif field in ("finished", "deleted") or wl.state == "inactive":
            unsettled.discard(key)

    def _sample_before(self, lq: tuple[str, str], at_s: float, *, now: bool) -> bool:
        """Before an event of one of `lq`'s workloads at `at_s` changes its usage: the sample
        due by then; or, `now`, one at `at_s` (Kueue's LocalQueue controller samples at every
        reconcile while an entry penalty is unsettled, Reconcile's HasPendingPenalty; its
        status leaves unsettled penalties out, as this sample, taken before the event starts a
        run, does). Whether it changed what the status shows."""
        if now and lq in self._due and self._samples(lq):
            return self._take_sample(lq, at_s)
        return self._sample_due(lq, at_s)

    def sample(self, now_s: float) -> set[ObjectRef]:
        """The LocalQueues whose admission fair sharing sample is due by `now_s`, sampled
        (`_sample_due`)."""
        return {self._lq_ref(lq) for lq in sorted(self._due) if self._sample_due(lq, now_s)}

    def next_sample_s(self) -> float | None:
        """When the next sample of a LocalQueue with its ClusterQueue is due (None: none)."""
        dues = [due for lq, due in self._due.items() if self._samples(lq)]
        return min(dues) if dues else None

    def _samples(self, lq: tuple[str, str]) -> bool:
        """Kueue's LocalQueue controller reconciles usage only of a LocalQueue not stopped
        whose ClusterQueue is there and active (Reconcile returns before it otherwise, and
        requeues nothing: reactivated, the ClusterQueue's event brings the next sample)."""
        cluster_queue = self._local_queues.get(lq)
        return (
            cluster_queue in self._cluster_queues
            and cluster_queue not in self._inactive
            and lq not in self._stopped
        )

    def _sample_due(self, lq: tuple[str, str], now_s: float) -> bool:
        """Sample `lq` at the last tick at or before `now_s` of its grid: every
        `usageSamplingInterval` from its last sample or settlement, as Kueue's LocalQueue
        controller requeues itself (pkg/controller/core/localqueue_controller.go, Reconcile:
        RequeueAfter the interval less the time since the ledger's LastUpdate). The tick, not
        `now_s`, so that every watcher writes the same status however late its timer fires.
        Whether it changed what the status shows."""
        due = self._due.get(lq)
        if self._fair is None or due is None or due > now_s or not self._samples(lq):
            return False
        interval = self._fair.usage_sampling_interval_s
        tick = due + math.floor((now_s - due) / interval) * interval if interval > 0 else now_s
        return self._take_sample(lq, tick)

    def _take_sample(self, lq: tuple[str, str], at_s: float) -> bool:
        """Show `lq`'s usage decayed to `at_s` (reconcileConsumedUsage: consumedResources,
        lastUpdate); the next sample is due an interval later. Differs from Kueue: a
        LocalQueue that has consumed nothing, and showed nothing, keeps its lastUpdate (its
        status would say nothing new; thousands of idle queues would otherwise cost a write
        each per interval). Whether it changed what the status shows."""
        fair = self._fair
        assert fair is not None
        shown = self._shown.get(lq)
        if shown is not None:  # an event told late (another clock) moves no lastUpdate back
            at_s = max(at_s, shown[0])
        self._due[lq] = at_s + fair.usage_sampling_interval_s
        consumed = self._usage.consumed("/".join(lq), now_s=at_s, config=fair)
        if not consumed and (shown is None or not shown[1]):
            return False
        self._shown[lq] = (at_s, consumed)
        return True

    def _fair_sharing_status(self, lq: tuple[str, str]) -> dict[str, Any]:
        """Kueue's LocalQueue `fairSharing.admissionFairSharingStatus` as of its last sample
        (none yet: empty, as of the LocalQueue's creation)."""
        at_s, consumed = self._shown.get(lq, (0.0, {}))
        return {
            "admissionFairSharingStatus": {
                "consumedResources": {
                    name: quantity_of(name, round(value * 1000)) for name, value in consumed.items()
                },
                "lastUpdate": format_metav1_time(at_s),
            }
        }

    def _queue_status(self, status: pb.ClusterQueueStatus) -> set[ObjectRef]:
        self._cluster_queues[status.name] = cluster_queue_status(status)
        if status.active:
            self._inactive.discard(status.name)
        else:
            self._inactive.add(status.name)
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
            lq = split_key(name)
            if not applied:
                self._local_queues.pop(lq, None)
                self._stopped.discard(lq)
                for book in (self._shown, self._due, self._unsettled):
                    book.pop(lq, None)  # Kueue drops its usage with it
                self._usage.forget("/".join(kept) for kept in self._local_queues)
                return set()
            if self._fair is not None and lq not in self._shown:
                # Kueue's first reconcile: nothing consumed, lastUpdate now.
                created_s = env.time_unix_nano / 1e9
                self._shown[lq] = (created_s, {})
                self._due[lq] = created_s + self._fair.usage_sampling_interval_s
            try:
                manifest = applied_document(env.config_applied)
            except PayloadError:  # admission dead-letters it; no ClusterQueue known here
                manifest = {}
            spec = manifest.get("spec")
            spec = spec if isinstance(spec, dict) else {}  # admission dead-letters it
            self._local_queues[lq] = str(spec.get("clusterQueue") or "")
            if spec.get("stopPolicy") in (None, "", "None"):
                self._stopped.discard(lq)
            else:
                self._stopped.add(lq)
            return {self._lq_ref(lq)}
        if kind == "ClusterQueue":
            cq = _cluster_queue_of(env.config_applied) if applied else None
            self._usage_based.discard(name)
            if applied:
                self._cluster_queues.setdefault(name, None)
                self._cluster_queue_checks[name] = _named_checks(cq)
                if cq is not None and cq.admission_mode is AdmissionMode.USAGE_BASED:
                    self._usage_based.add(name)
            else:
                self._cluster_queues.pop(name, None)
                self._cluster_queue_checks.pop(name, None)
                self._inactive.discard(name)
            return {self._lq_ref(lq) for lq, cq in self._local_queues.items() if cq == name}
        return set()

    def names_check(self, wl: WorkloadRecord, check: str) -> bool:
        """Whether `check` is one of `wl`'s ClusterQueue's (its admission's, else its
        LocalQueue's): Kueue's workload controller keeps status.admissionChecks in line with
        the ClusterQueue's list, so a check it does not name has no Retry to act on (admission
        asks `core.requeue_state.retry_counts_waiting`). A ClusterQueue this book has not seen
        (its config before what this cluster remembers) cannot be judged: it counts."""
        cq = (wl.admission or {}).get("clusterQueue") or self._local_queues.get(wl.local_queue)
        named = self._cluster_queue_checks.get(cq or "")
        return named is None or check in named

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
            "flavorsReservation": flavor_list(+tally.reserved),
            self._lq_usage_field: flavor_list(+tally.used),
            "conditions": [
                kueue_condition("Active", True, "Ready", "Can submit new workloads to localQueue")
                if active
                else kueue_condition(
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


def _cluster_queue_of(applied: pb.ConfigApplied) -> ClusterQueue | None:
    """An applied ClusterQueue's manifest; None when it is not valid (admission dead-letters
    it, so no workload is reserved through it)."""
    try:
        cq = applied_object(applied)
    except PayloadError:
        return None
    return cq if isinstance(cq, ClusterQueue) else None


def _named_checks(cq: ClusterQueue | None) -> frozenset[str]:
    """The admission checks a ClusterQueue names (none when its manifest is not valid)."""
    if cq is None:
        return frozenset()
    return frozenset(rule.name for rule in cq.admission_checks)

"""The queues' side of a cluster's Kueue statuses: ClusterQueues as admission reports them,
LocalQueues' counts and flavor sums over their workloads, and admission fair sharing's usage of
each LocalQueue (its runs and its samples). `book.StatusBook` is built on it."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from muster.api.check_states import format_time as format_metav1_time
from muster.api.model import AdmissionFairSharingConfig, ClusterQueue
from muster.api.wellknown import LOCAL_CLUSTER
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.admission_fair_sharing import AdmissionUsage
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
        # Admission fair sharing (Kueue's Configuration): each LocalQueue's usage, and when an
        # event last started or ended one of its runs (its lastUpdate).
        self._fair = fair
        self._reclaimable_pods = reclaimable_pods  # Kueue's gate ReclaimablePods
        self._usage = AdmissionUsage()
        self._usage_at: dict[tuple[str, str], float] = {}

    def _resized(self, key: str, wl: WorkloadRecord, *, at_s: float) -> set[ObjectRef]:
        """Admission fair sharing: `wl`'s run holds what it holds now from `at_s` (a no-op
        when it runs nowhere or holds that already)."""
        fair = self._fair
        if fair is None or wl.state not in ("reserving", "admitted"):
            return set()
        held = wl.held(reclaimable=self._reclaimable_pods)
        self._usage.resize(key, held, at_s=at_s, config=fair)
        self._usage_at[wl.local_queue] = max(at_s, self._usage_at.get(wl.local_queue, at_s))
        return {self._lq_ref(wl.local_queue)}

    def _run(self, key: str, wl: WorkloadRecord, field: str, *, at_s: float) -> None:
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
                    name: quantity_of(name, round(value * 1000)) for name, value in consumed.items()
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
            lq = split_key(name)
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
                self._cluster_queue_checks[name] = _named_checks(env.config_applied)
            else:
                self._cluster_queues.pop(name, None)
                self._cluster_queue_checks.pop(name, None)
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


def _named_checks(applied: pb.ConfigApplied) -> frozenset[str]:
    """The admission checks a ClusterQueue's manifest names; none when it is not valid
    (admission dead-letters it, so no workload is reserved through it)."""
    try:
        cq = applied_object(applied)
    except PayloadError:
        return frozenset()
    if not isinstance(cq, ClusterQueue):
        return frozenset()
    return frozenset(rule.name for rule in cq.admission_checks)

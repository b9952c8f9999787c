"""The invariants `muster bench chaos` checks, folded from what was recorded. Pure.

`EventBook` reads the event stream in order: every workload finished once, never admitted twice
without an eviction between, and admission's books (quota held from its reservation until
the completion of its current eviction, `requeued`, `pending`, `finished` or `deleted`) within
each cohort's quota after every event. As admission's ledger does, it takes no decision about
a workload that has ended (a round decided before its replica read the `finished` is stored
after it: it held that quota until the replica read the end, and nothing acts on it) nor one
naming another `submitted` than the workload's current one (docs/events.md, "A name used
again").
It also checks that a workload of a ClusterQueue requiring admission checks is admitted only
after a Ready answer stored since its last eviction: Kueue resets the checks there and only
there (evict.resetChecksOnEviction), so a Ready written after the reset, while its pods stop
or it waits, admits its next reservation at once, and so does admission (docs/kueue-
compatibility.md, "When check states start over"). It lists each completed eviction (the
workload, the `evicted`'s sequence) for `ClusterBook`.
`ClusterBook` reads the simulated cluster's changes in revision order: the pods bound and not
done (what actually runs, or is about to on its node) within each cohort's quota and each
node's allocatable cpu after every change, and how many distinct pods of each workload ran;
no workload's bound pods belonging to two admissions at once (two places: a moved workload's
old pods beside its new ones); and, for each completed eviction, none of the evicted
admissions' pods still bound once the cluster is read up to a revision at or after the
eviction's answer (`expect_gone`: its pods stop before the binder answers, in every part).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from muster.api import parse_quantity
from muster.cluster.backend import ClusterChange
from muster.cluster.objects import node_view, pod_view
from muster.contracts.v1 import events_pb2 as pb

DONE_PHASES = frozenset({"Succeeded", "Failed"})
READY = "Ready"
DEACTIVATED = "InactiveWorkload"
# Admission's decisions about a workload: each names the `submitted` it decides about.
_DECISIONS = frozenset({"pending", "quota_reserved", "admitted", "evicted", "requeued"})


@dataclass(slots=True)
class Breach:
    """Times a bound was exceeded, by how much at most (milli-cpu), and the first time."""

    count: int = 0
    worst_milli: int = 0
    first: str = ""  # where and when, for the one who reads the logs

    def check(self, used: int, limit: int, *, where: str) -> None:
        if used > limit:
            self.count += 1
            self.worst_milli = max(self.worst_milli, used - limit)
            self.first = self.first or f"{where}: {used}m of {limit}m"


@dataclass(slots=True)
class EventBook:
    """The stream's view; feed every event of MUSTER_EVENTS in order (`apply`)."""

    cohort_of: Mapping[str, str]  # ClusterQueue -> cohort
    quota: Mapping[str, int]  # cohort -> milli-cpu
    submitted: set[str] = field(default_factory=set)
    named: set[str] = field(default_factory=set)  # by any event (gangs outside Kueue: no submitted)
    finished: dict[str, int] = field(default_factory=dict)  # workload -> finished events
    admissions: dict[str, int] = field(default_factory=dict)  # workload -> pods admitted, summed
    twice_admitted: set[str] = field(default_factory=set)
    evictions: int = 0
    permits_in_parts: int = 0  # gang_permitted part 0 of several: a big workload bound in parts
    moves: int = 0  # routed to another ClusterQueue
    moves_across: int = 0  # of those, into another cohort
    books: Breach = field(default_factory=Breach)
    checked_queues: frozenset[str] = frozenset()  # ClusterQueues requiring admission checks
    admitted_unready: set[str] = field(default_factory=set)  # admitted without a Ready check
    # (workload, sequence of its `evicted`) per accepted eviction_completed, in stream order
    completed_evictions: list[tuple[str, int]] = field(default_factory=list)
    _ready: set[str] = field(default_factory=set)  # a Ready answer since its last eviction
    _admitted: set[str] = field(default_factory=set)  # admitted since its last eviction
    _holds: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (cohort, milli)
    # key -> its eviction's event id and sequence
    _evicting: dict[str, tuple[str, int]] = field(default_factory=dict)
    _used: dict[str, int] = field(default_factory=dict)  # cohort -> milli held
    # key -> event id of its current `submitted` (the first since its last `deleted`)
    _lives: dict[str, str] = field(default_factory=dict)
    _ended: dict[str, str] = field(default_factory=dict)  # key -> "finished" | "deleted"

    def apply(self, env: pb.Envelope) -> None:
        key = env.workload
        self.named.add(key)
        kind = env.WhichOneof("payload")
        if kind in _DECISIONS and not self._about_current(env):
            return
        match kind:
            case "submitted":
                self.submitted.add(key)
                if self._ended.get(key) != "finished" and key not in self._lives:
                    self._ended.pop(key, None)  # a name deleted and used again: a new life
                    self._lives[key] = env.event_id
            case "quota_reserved":
                if key in self._admitted:
                    return  # stored after its admitted, which held it (docs/events.md, "Order")
                self._release(key)
                self._hold(key, env.quota_reserved.admission, at=env.sequence)
            case "admitted":
                if key in self._admitted:
                    self.twice_admitted.add(key)
                queue = env.admitted.admission.cluster_queue
                if queue in self.checked_queues and key not in self._ready:
                    self.admitted_unready.add(key)
                self._admitted.add(key)
                if key not in self._holds:  # admitted with its reservation (docs/events.md)
                    self._hold(key, env.admitted.admission, at=env.sequence)
                pods = sum(a.count for a in env.admitted.admission.pod_set_assignments)
                self.admissions[key] = self.admissions.get(key, 0) + pods
            case "routed":
                moved = env.routed.from_cluster_queue, env.routed.to_cluster_queue
                if moved[0] != moved[1]:
                    self.moves += 1
                    cohorts = {self.cohort_of.get(cq, cq) for cq in moved}
                    self.moves_across += len(cohorts) > 1
            case "gang_permitted":
                if env.gang_permitted.parts > 1 and env.gang_permitted.part == 0:
                    self.permits_in_parts += 1
            case "admission_check":
                if env.admission_check.state == READY:
                    self._ready.add(key)
                else:
                    self._ready.discard(key)
            case "evicted":
                self.evictions += 1
                self._admitted.discard(key)
                self._ready.discard(key)
                if env.evicted.reason == DEACTIVATED:
                    self._release(key)
                elif key in self._holds:
                    self._evicting[key] = (env.event_id, env.sequence)
            case "eviction_completed":
                # Released when it completes the current eviction (or names none, as binders
                # from before evictions were named wrote it): admission's rule, so that an
                # admission accepting a stale completion shows here as going over quota.
                named = env.eviction_completed.eviction_id
                evicting = self._evicting.get(key)
                if evicting is not None and named in ("", evicting[0]):
                    self.completed_evictions.append((key, evicting[1]))
                    self._release(key)
            case "requeued" | "pending":
                self._release(key)
            case "deleted":
                self._end(key, "deleted")
            case "finished":
                self.finished[key] = self.finished.get(key, 0) + 1
                self._end(key, "finished")

    @property
    def finished_twice(self) -> set[str]:
        return {key for key, n in self.finished.items() if n > 1}

    def _about_current(self, env: pb.Envelope) -> bool:
        """Whether admission's decision `env` is about the workload's current life (a decision
        about a workload never seen submitted is taken: admission stores none)."""
        if env.workload in self._ended:
            return False
        life = self._lives.get(env.workload)
        return not env.submitted_id or life is None or env.submitted_id == life

    def _end(self, key: str, how: str) -> None:
        self._release(key)
        self._admitted.discard(key)
        self._lives.pop(key, None)
        self._ended[key] = how

    def _hold(self, key: str, admission: pb.Admission, *, at: int) -> None:
        cohort = self.cohort_of.get(admission.cluster_queue, admission.cluster_queue)
        milli = sum(
            parse_quantity(usage)
            for a in admission.pod_set_assignments
            for resource, usage in a.resource_usage.items()
            if resource == "cpu"
        )
        self._holds[key] = (cohort, milli)
        self._used[cohort] = self._used.get(cohort, 0) + milli
        holders = sorted(k for k, (c, _) in self._holds.items() if c == cohort)
        where = f"cohort {cohort} at #{at} ({key} reserved; held by {', '.join(holders)})"
        self.books.check(self._used[cohort], self.quota.get(cohort, 0), where=where)

    def _release(self, key: str) -> None:
        self._evicting.pop(key, None)
        held = self._holds.pop(key, None)
        if held is not None:
            self._used[held[0]] -= held[1]


@dataclass(frozen=True, slots=True)
class _Pod:
    workload: str  # "<namespace>/<name>", "" for a pod of no workload
    node: str
    cpu_milli: int
    admission: int  # the `admitted`'s sequence it was made for (0: none, a gang's)
    cohort: str | None  # whose quota it counts in (None: none's)


@dataclass(frozen=True, slots=True)
class _Gone:
    """Pods of `workload` made for admissions before sequence `before` must be gone by
    cluster revision `revision`."""

    workload: str
    before: int
    revision: int


@dataclass(slots=True)
class ClusterBook:
    """The cluster's view; feed every change of its watch in revision order (`apply`)."""

    cohort_of_workload: Mapping[str, str]  # workload key -> cohort (of its declared queue)
    quota: Mapping[str, int]  # cohort -> milli-cpu
    # `admitted` sequence -> the cohort it admitted into (a routed workload's may be another):
    # a pod made for an admission counts there; fill it before the pods arrive
    cohort_of_admission: dict[int, str] = field(default_factory=dict)
    pods_outside_quota: Breach = field(default_factory=Breach)
    node_overcommit: Breach = field(default_factory=Breach)
    ran: dict[str, set[str]] = field(default_factory=dict)  # workload -> uids seen Running
    two_places: Breach = field(default_factory=Breach)  # bound pods of two admissions at once
    left_running: Breach = field(default_factory=Breach)  # evicted pods bound after the answer
    revision: int = 0
    _pods: dict[str, _Pod] = field(default_factory=dict)  # bound and not done, by key
    _admissions: dict[str, dict[int, int]] = field(default_factory=dict)  # workload -> pods
    _gone: list[_Gone] = field(default_factory=list)  # by revision
    _nodes: dict[str, int] = field(default_factory=dict)  # name -> allocatable milli-cpu
    _on_node: dict[str, int] = field(default_factory=dict)
    _in_cohort: dict[str, int] = field(default_factory=dict)

    def apply(self, change: ClusterChange) -> None:
        self.revision = max(self.revision, change.revision)
        if change.kind == "Node":
            self._node(change)
        elif change.kind == "Pod":
            self._pod(change.key, change.obj, deleted=change.type == "DELETED")
        self._check_gone()

    def expect_gone(self, workload: str, *, before: int, revision: int) -> None:
        """Once read up to `revision`, no pod of `workload` made for an admission stored
        before sequence `before` may be bound and not done."""
        self._gone.append(_Gone(workload, before, revision))
        self._gone.sort(key=lambda g: g.revision)
        self._check_gone()

    def _check_gone(self) -> None:
        while self._gone and self._gone[0].revision <= self.revision:
            gone = self._gone.pop(0)
            left = sorted(
                k
                for k, p in self._pods.items()
                if p.workload == gone.workload and 0 < p.admission < gone.before
            )
            where = (
                f"{gone.workload} at revision {self.revision} (eviction #{gone.before} answered"
                f" by revision {gone.revision}; still bound: {', '.join(left)})"
            )
            self.left_running.check(len(left), 0, where=where)

    def _node(self, change: ClusterChange) -> None:
        if change.type == "DELETED":
            self._nodes.pop(change.key, None)
            return
        try:
            view = node_view(change.obj)
        except msgspec.ValidationError:
            return
        self._nodes[view.name] = view.allocatable.get("cpu", 0)

    def _pod(self, key: str, obj: Mapping[str, Any], *, deleted: bool) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            self._count(old, -1)
        if deleted:
            return
        try:
            view = pod_view(obj)
        except msgspec.ValidationError:
            return
        workload = f"{view.namespace}/{view.workload}" if view.workload else ""
        if view.phase == "Running" and view.group:  # a Kueue workload's, or a gang's
            self.ran.setdefault(view.group, set()).add(view.uid)
        if not view.node_name or view.phase in DONE_PHASES:
            return
        pod = _Pod(
            workload=workload,
            node=view.node_name,
            cpu_milli=view.requests.get("cpu", 0),
            admission=view.admission,
            cohort=self.cohort_of_admission.get(view.admission)
            or self.cohort_of_workload.get(workload),
        )
        self._pods[key] = pod
        self._count(pod, +1)

    def _count_admission(self, pod: _Pod, sign: int) -> None:
        if not pod.admission:
            return
        counts = self._admissions.setdefault(pod.workload, {})
        counts[pod.admission] = counts.get(pod.admission, 0) + sign
        if not counts[pod.admission]:
            del counts[pod.admission]
        if sign > 0:
            where = f"{pod.workload} at revision {self.revision} (admissions {sorted(counts)})"
            self.two_places.check(len(counts), 1, where=where)

    def _count(self, pod: _Pod, sign: int) -> None:
        self._count_admission(pod, sign)
        self._on_node[pod.node] = self._on_node.get(pod.node, 0) + sign * pod.cpu_milli
        cohort = pod.cohort
        if cohort is not None:
            self._in_cohort[cohort] = self._in_cohort.get(cohort, 0) + sign * pod.cpu_milli
        if sign > 0:
            used, limit = self._on_node[pod.node], self._nodes.get(pod.node, 0)
            where = f"node {pod.node} at revision {self.revision} ({pod.workload}"
            if used > limit and not self.node_overcommit.first:  # who holds it, for the logs
                on_node = (
                    f"{k} {p.cpu_milli}m" for k, p in self._pods.items() if p.node == pod.node
                )
                where += f"; on it {', '.join(sorted(on_node))}"
            self.node_overcommit.check(used, limit, where=where + ")")
            if cohort is not None:
                where = f"cohort {cohort} at revision {self.revision} ({pod.workload})"
                self.pods_outside_quota.check(
                    self._in_cohort[cohort], self.quota.get(cohort, 0), where=where
                )

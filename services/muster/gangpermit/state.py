"""Gang-permit's state: admitted gangs, their pending pods, and the decisions on them.

Rebuilt by folding the cluster's workload events in stream order (`apply`), so a restarted
gangpermit knows which gangs wait, which were permitted and still hold a reservation, and
which are done. `decide` is the pure pass over waiting gangs; the service publishes what it
returns and folds its own events back in. No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

import msgspec

from muster.cluster.objects import PodView
from muster.contracts.v1 import events_pb2
from muster.core.gang import NodeCapacity, NodeName, NoFit, Placement, PodKey, place_gang
from muster.gangpermit.snapshot import pod_key, pod_request, reserved_usage


class Phase(Enum):
    WAITING = "Waiting"  # admitted; waiting for its pods, or for room
    PERMITTED = "Permitted"  # gang_permitted published; holds a reservation until bound


class Gang:
    """One admitted workload's gang, mutable, owned by `GangState`."""

    __slots__ = ("admitted", "bindings", "expected", "key", "last_reason", "pending", "phase")

    def __init__(self, key: str, admitted: events_pb2.Envelope, expected: int) -> None:
        self.key = key
        self.admitted = admitted  # the cause of what gangpermit publishes about this gang
        self.expected = expected
        self.pending: dict[PodKey, events_pb2.PodRef] = {}
        self.phase = Phase.WAITING
        self.bindings: tuple[tuple[PodKey, NodeName], ...] = ()
        self.last_reason = ""

    @property
    def admitted_ns(self) -> int:
        return self.admitted.time_unix_nano


class Permit(msgspec.Struct, frozen=True, kw_only=True):
    workload: str
    placement: Placement


class TimedOut(msgspec.Struct, frozen=True, kw_only=True):
    workload: str
    message: str


Decision = Permit | TimedOut

_DONE_EVENTS = frozenset(
    {"workload.bound", "workload.finished", "workload.eviction_completed", "workload.deleted"}
)


class GangState:
    """Every gang of one cluster that is not done yet, plus workload priorities."""

    def __init__(self) -> None:
        self.gangs: dict[str, Gang] = {}
        self.priorities: dict[str, int] = {}
        self.applied_sequence = 0

    def apply(self, env: events_pb2.Envelope) -> bool:
        """Fold one event in; return whether it may let a waiting gang go (worth a pass).

        Events at or below the last applied sequence change nothing (a redelivery).
        """
        if env.sequence and env.sequence <= self.applied_sequence:
            return False
        self.applied_sequence = max(self.applied_sequence, env.sequence)
        key, kind = env.workload, env.type
        if kind == "workload.submitted":
            self.priorities[key] = env.submitted.priority
            return False
        if kind == "workload.admitted":
            counts = sum(a.count for a in env.admitted.admission.pod_set_assignments)
            self.gangs[key] = Gang(key, env, counts)
            return True
        gang = self.gangs.get(key)
        if kind == "workload.pods_pending":
            if gang is not None and gang.phase is Phase.WAITING:
                gang.pending = {pod_key(p.namespace, p.name): p for p in env.pods_pending.pods}
                return True
            return False
        if kind == "workload.gang_permitted":
            if gang is not None:
                gang.phase = Phase.PERMITTED
                gang.bindings = tuple(
                    (pod_key(b.pod.namespace, b.pod.name), NodeName(b.node))
                    for b in env.gang_permitted.bindings
                )
            return False
        if kind == "workload.gang_rejected" or kind in _DONE_EVENTS:
            self.gangs.pop(key, None)
            if kind == "workload.deleted":
                self.priorities.pop(key, None)
            return kind != "workload.gang_rejected" or gang is not None
        return False

    def permitted(self, workload: str, placement: Placement) -> None:
        """Record a permit just published (before its event comes back through the stream)."""
        gang = self.gangs.get(workload)
        if gang is not None:
            gang.phase = Phase.PERMITTED
            gang.bindings = tuple((b.pod, b.node) for b in placement.bindings)

    def forget(self, workload: str) -> None:
        self.gangs.pop(workload, None)

    def in_order(self) -> list[Gang]:
        """Waiting gangs by priority (highest first), then admission time, then key."""
        waiting = [g for g in self.gangs.values() if g.phase is Phase.WAITING]
        return sorted(waiting, key=lambda g: (-self.priorities.get(g.key, 0), g.admitted_ns, g.key))

    def reservations(self) -> list[tuple[PodKey, NodeName]]:
        """Pod→node of every permitted gang, in a stable order."""
        out = [b for g in self.gangs.values() if g.phase is Phase.PERMITTED for b in g.bindings]
        return sorted(out)

    def decide(
        self,
        nodes: Sequence[NodeCapacity],
        pods: Mapping[PodKey, PodView],
        *,
        now_ns: int,
        timeout_ns: int,
    ) -> list[Decision]:
        """One pass over waiting gangs, in order: permit those that fit, time out the overdue.

        Gangs are placed one whole gang at a time; each permit's usage is reserved before the
        next gang is tried, on top of earlier permits still waiting to be bound. A gang whose
        pods are not all pending yet is skipped (it waits). Records each gang's last reason;
        does not change phases (the caller does, once it published).
        """
        reserved = _mutable(reserved_usage(self.reservations(), pods))
        decisions: list[Decision] = []
        for gang in self.in_order():
            overdue = now_ns >= gang.admitted_ns + timeout_ns
            requests = [pod_request(pods[k]) for k in sorted(gang.pending) if _unbound(pods, k)]
            if len(requests) < gang.expected:
                gang.last_reason = f"{len(requests)} of {gang.expected} pods pending"
                if overdue:
                    decisions.append(TimedOut(workload=gang.key, message=_timed_out(gang)))
                continue
            result = place_gang(requests, nodes, reserved=reserved)
            if isinstance(result, NoFit):
                gang.last_reason = result.reason
                if overdue:
                    decisions.append(TimedOut(workload=gang.key, message=_timed_out(gang)))
                continue
            for node, usage in result.usage.items():
                total = reserved.setdefault(node, {})
                for resource, amount in usage.items():
                    total[resource] = total.get(resource, 0) + amount
            decisions.append(Permit(workload=gang.key, placement=result))
        return decisions


def _unbound(pods: Mapping[PodKey, PodView], key: PodKey) -> bool:
    pod = pods.get(key)
    return pod is not None and not pod.node_name and pod.phase == "Pending"


def _mutable(reserved: Mapping[NodeName, Mapping[str, int]]) -> dict[NodeName, dict[str, int]]:
    return {node: dict(usage) for node, usage in reserved.items()}


def _timed_out(gang: Gang) -> str:
    return f"gang of {gang.expected} pods not placed before the permit timeout: {gang.last_reason}"

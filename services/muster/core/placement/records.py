"""The records `PlacementState` keeps between passes: a pod, a gang (or a CompositePodGroup of
a tree of gangs), and the room nominated for a preemptor. Mutable, changed only by the state
and the scheduler."""

from __future__ import annotations

import math

from muster.core.placement.model import CompositeSpec, GangKey, GangSpec, NodeName, PodInfo, PodKey
from muster.core.placement.signature import Signature

WAITING_FOR_SPEC = "waiting for its Workload/PodGroup"

UnitOrder = tuple[int, float, str, int]  # -priority, created_s, key, 0 for a gang / 1 a pod


class PodRecord:
    """A pod: pending (`node` None), permitted (`node`, not `bound`) or bound."""

    __slots__ = ("bound", "info", "node", "owner", "reason", "sig", "tried")

    def __init__(self, info: PodInfo, sig: Signature, owner: str) -> None:
        self.info = info
        self.sig = sig
        self.owner = owner  # what a preemption evicts with it
        self.node: NodeName | None = None
        self.bound = False
        self.reason = ""  # the last GangWaiting reason, placed on its own
        self.tried = -1  # epoch of its last failed attempt, placed on its own

    def order(self) -> UnitOrder:
        return (-self.info.priority, self.info.created_s, self.info.key, 1)


class Nomination:
    """Room kept for a preemptor: its planned placement, and the victims' pods still holding."""

    __slots__ = ("priority", "usage", "victim_pods")

    def __init__(
        self, priority: int, usage: list[tuple[NodeName, Signature, int]], victim_pods: set[PodKey]
    ) -> None:
        self.priority = priority
        self.usage = usage  # (node, signature, pods of it)
        self.victim_pods = victim_pods


class GangRecord:
    """A gang, or (`composite` set) a CompositePodGroup of a tree of gangs (`trees`)."""

    __slots__ = (
        "children",
        "composite",
        "former_victims",
        "held",
        "key",
        "nomination",
        "parent",
        "placed",
        "pods",
        "priority",
        "reason",
        "spec",
        "started_s",
        "timed_out",
        "tried",
    )

    def __init__(self, key: GangKey) -> None:
        self.key = key
        self.spec: GangSpec | None = None
        self.pods: set[PodKey] = set()
        self.held = 0  # pods permitted or bound
        self.placed = False  # permitted as a gang: later pods are placed on their own
        self.started_s: float | None = None  # the first attempt of the current try
        self.timed_out = False
        self.reason = ""  # the last GangWaiting (or timeout, preemption) reason
        self.tried = -1  # epoch of its last failed attempt
        self.nomination: Nomination | None = None
        # Timed out while these pods of its victims still held room: tried again once they
        # are all gone (`PlacementState.await_victims`).
        self.former_victims: set[PodKey] = set()
        # A tree of gangs: the CompositePodGroup above (None for a root), the groups below a
        # composite, its spec, and the priority its gangs have.
        self.parent: GangKey | None = None
        self.children: set[GangKey] = set()
        self.composite: CompositeSpec | None = None
        self.priority = 0

    def deadline_s(self, default_timeout_s: float) -> float | None:
        if self.started_s is None:
            return None
        if self.composite is not None:  # a tree's: its root's, if it has one
            timeout = self.composite.timeout_s
            return None if timeout is None else self.started_s + timeout
        if self.spec is None:
            return None
        timeout = self.spec.timeout_s
        timeout = default_timeout_s if timeout is None else timeout
        return None if math.isinf(timeout) else self.started_s + timeout

    def order(self) -> UnitOrder:
        if self.composite is not None:
            return (-self.priority, self.composite.created_s, self.key, 0)
        spec = self.spec
        if spec is None:
            return (0, 0.0, self.key, 0)
        return (-spec.priority, spec.created_s, self.key, 0)

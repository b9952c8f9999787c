"""Gang placement's data: nodes, pods, gangs, and the decisions a scheduling pass returns.

All values are frozen msgspec structs in milli-units (`Resources`), like the admission core.
Callers (the gangpermit service, the simulator, the benchmark) build them from api objects
with `muster.core.placement.sources`; `GangScheduler` owns the mutable state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, NewType

import msgspec

from muster.api.model import LabelSelector, Resources, Taint, Toleration

PodKey = NewType("PodKey", str)  # "<namespace>/<name>"
NodeName = NewType("NodeName", str)
# "<namespace>/<workload>/<podGroup>/<replicaKey>" for the Workload API,
# "<namespace>/<name>" for a PodGroup or a Kueue workload.
GangKey = NewType("GangKey", str)

PODS = "pods"  # the node's allocatable pod count; each pod takes 1 (1000 milli-units)
ONE_POD = 1000
DEFAULT_MAX_PODS = 110_000  # the kubelet's default --max-pods, in milli-units

Scoring = Literal["binpack", "spread"]


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One node as placement sees it. `allocatable` always lists `pods` (callers default it)."""

    name: NodeName
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = msgspec.field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = True


class PodInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One pod muster schedules, pending (`node == ""`) or bound to `node`.

    `gang` is the gang the pod belongs to; None for a pod placed on its own (the Workload API's
    basic policy, or a pod that names muster as its scheduler and no gang). `workload` is
    what a preemption evicts as a whole ("" means the pod itself); `priority` and `created_s`
    order pods placed on their own, and choose victims.
    """

    key: PodKey
    gang: GangKey | None = None
    workload: str = ""
    priority: int = 0
    created_s: float = 0.0
    requests: Resources = msgspec.field(default_factory=dict)  # per pod, without `pods`
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    # Required node affinity, flattened: a node qualifies if any term matches its labels.
    node_affinity_terms: tuple[LabelSelector, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node: NodeName | Literal[""] = ""
    # Whether `workload` is a CompositePodGroup (sub)tree: victims are spared in the order
    # composite trees, groups, single pods (workload-aware preemption).
    tree_owner: bool = False

    @property
    def owner(self) -> str:
        """What a preemption evicts together with this pod."""
        return self.workload or self.key


class TopologyRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Pods of the gang must (`required`) or should share one value of node label `key`."""

    key: str
    required: bool


NO_DEADLINE = math.inf  # a gang's timeout_s when it waits as long as it takes (v1.36+)


class CompositeSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A CompositePodGroup above a gang: at quorum when `min_groups` of its child groups are;
    all its pods share one value of `topology` (required) when given."""

    key: GangKey
    min_groups: int = 1  # minGroupCount for a gang; 1 for the basic policy
    topology: TopologyRequest | None = None
    created_s: float = 0.0
    # A root's: the deadline of its tree's first placement (None: none, as since v1.36).
    timeout_s: float | None = None


class GangSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A gang: placed when `min_count` of its pods are pending, all of them at once or none.

    `created_s` orders gangs of equal priority; `timeout_s` (None: the scheduler's default;
    `NO_DEADLINE`: none) runs from the gang's first placement attempt and is shared by the
    whole gang. `parents` are the CompositePodGroups above it, innermost first: the tree of
    the outermost is placed as one unit until it has been placed once. `preempts` False: the
    gang never evicts others (preemptionPolicy Never).
    """

    key: GangKey
    min_count: int
    priority: int = 0
    created_s: float = 0.0
    timeout_s: float | None = None
    topology: TopologyRequest | None = None
    workload: str = ""  # what a preemption evicts ("" means the gang key)
    parents: tuple[CompositeSpec, ...] = ()
    preempts: bool = True


class Binding(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    pod: PodKey
    node: NodeName


# --- decisions: what one scheduling pass returns, in the order it decided them ---------------


class GangWaiting(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="GangWaiting"):
    """The gang (or a pod placed on its own, keyed by pod) cannot be placed now.

    Returned when the reason first appears or changes, not on every pass. `reason` is what the
    user sees: "3 of 4 pods pending", "0/5 nodes are available: 2 Insufficient cpu, ...".
    For a CompositePodGroup tree, `gang` is its root and `groups` the gangs in it.
    """

    gang: GangKey
    reason: str
    pending: int
    min_count: int
    groups: tuple[GangKey, ...] = ()


class GangPermitted(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="GangPermitted"):
    """Every pod in `bindings` goes to its node; their room is reserved until bound.

    A pod placed on its own is permitted as a gang of one keyed by its pod key (`basic`).
    """

    gang: GangKey
    bindings: tuple[Binding, ...]  # sorted by pod
    basic: bool = False


class GangTimedOut(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="GangTimedOut"):
    """The gang's deadline passed: every pod in `pods` is rejected together; nothing is held."""

    gang: GangKey
    reason: str
    pods: tuple[PodKey, ...]


class PlacementPreempted(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="PlacementPreempted"
):
    """`gang` fits only without `victims` (whole workloads of lower priority): evict them.

    The gang keeps the room the victims free (nominated) until it is placed, so no gang of
    lower priority takes it meanwhile.
    """

    gang: GangKey
    victims: tuple[str, ...]  # workload keys (PodInfo.owner), sorted
    pods: tuple[PodKey, ...]  # every pod of the victims, sorted


Decision = GangWaiting | GangPermitted | GangTimedOut | PlacementPreempted


class GangStatus(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a gang stands, for reports and the visibility API."""

    gang: GangKey
    phase: Literal["Waiting", "Permitted", "TimedOut", "Preempting"]
    reason: str
    pending: int
    min_count: int
    deadline_s: float | None  # None before the first attempt


__all__ = [
    "DEFAULT_MAX_PODS",
    "NO_DEADLINE",
    "ONE_POD",
    "PODS",
    "Binding",
    "CompositeSpec",
    "Decision",
    "GangKey",
    "GangPermitted",
    "GangSpec",
    "GangStatus",
    "GangTimedOut",
    "GangWaiting",
    "NodeInfo",
    "NodeName",
    "PlacementPreempted",
    "PodInfo",
    "PodKey",
    "Scoring",
    "TopologyRequest",
]

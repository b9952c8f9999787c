"""Dispatch: which worker cluster runs a workload whose ClusterQueue uses MultiKueue. Pure.

Once quota is reserved, the MultiKueue admission check picks one of the clusters its
MultiKueueConfig lists. `dispatch` takes the workload's demand (`demand_of`: its podsets as
admitted, pods × per-pod requests with the node selector, affinity and tolerations its flavors
put on them), the candidates in the listed order, each with the free room of its nodes (a
gang-permit heartbeat, or the simulator's nodes) or why it cannot take work now (lost, not
declared), and returns the chosen cluster with the room it will take per node, or why none can
take it now. The admission service and `muster simulate` both call it; neither keeps any state
here.

Fit is a first-fit estimate over nodes in name order, not a placement: the worker's gang-permit
places the gang for real, and a gang that does not fit there waits or times out as any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from muster.api.model import (
    Admission,
    AdmissionCheck,
    DispatchStrategy,
    LabelSelector,
    MultiKueueConfig,
    ResourceFlavor,
    Resources,
    Taint,
    Toleration,
    Workload,
)
from muster.api.wellknown import MULTIKUEUE_CONTROLLER
from muster.core.matching import selector_matches, untolerated_taint
from muster.core.placement.model import ONE_POD, PODS, NodeInfo
from muster.core.placement.sources import gang_of_admitted

MULTIKUEUE_CONFIG_KIND = "MultiKueueConfig"


# --- capacity: what a cluster reports --------------------------------------------------------


class NodeRoom(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One schedulable, Ready node: its labels and taints, and its room in milli-units
    (`pods` included: each pod takes 1000)."""

    name: str
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = msgspec.field(default_factory=dict)
    free: Resources = msgspec.field(default_factory=dict)


class ClusterCapacity(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A cluster's room as its gang-permit last saw it (the `MUSTER_CLUSTERS` heartbeat).

    `placed` lists the Kueue workloads whose pods `free` already counts (permitted or bound),
    so a dispatcher knows which of its own tentative holds the report has caught up with.
    `unreachable` says why the cluster's services cannot reach it now (its API server does not
    answer, its kubeConfig is bad), with Kueue's `reason` for a MultiKueueCluster's Active
    condition (ClientConnectionFailed, BadKubeConfig, ...); then it reports no room.
    """

    cluster: str
    nodes: tuple[NodeRoom, ...] = ()
    placed: tuple[str, ...] = ()
    unreachable: str = ""
    reason: str = ""


def node_room(node: NodeInfo, free: Mapping[str, int]) -> NodeRoom | None:
    """The room of a node placement may use, or None when it takes no new pods (cordoned,
    not Ready)."""
    if node.unschedulable or not node.ready:
        return None
    return NodeRoom(
        name=node.name,
        labels=node.labels,
        taints=node.taints,
        allocatable=node.allocatable,
        free=dict(free),
    )


Takes = Mapping[str, Resources]  # node -> what a dispatched workload is expected to take there


def minus(capacity: ClusterCapacity, holds: Iterable[Takes]) -> ClusterCapacity:
    """`capacity` less the room held for workloads dispatched there and not yet placed."""
    taken: dict[str, dict[str, int]] = {}
    for takes in holds:
        for node, amounts in takes.items():
            row = taken.setdefault(node, {})
            for resource, amount in amounts.items():
                row[resource] = row.get(resource, 0) + amount
    if not taken:
        return capacity
    nodes = tuple(
        msgspec.structs.replace(
            n,
            free={r: v - taken[n.name].get(r, 0) for r, v in n.free.items()},
        )
        if n.name in taken
        else n
        for n in capacity.nodes
    )
    return msgspec.structs.replace(capacity, nodes=nodes)


# --- demand: what a workload needs ---------------------------------------------------------


class PodSetDemand(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """`count` identical pods of one admitted podset."""

    name: str
    count: int
    requests: Resources  # per pod, `pods` included
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    node_affinity_terms: tuple[LabelSelector, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class Demand(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    pod_sets: tuple[PodSetDemand, ...]

    @property
    def pods(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    def total(self) -> dict[str, int]:
        """Summed over every pod, per resource."""
        total: dict[str, int] = {}
        for ps in self.pod_sets:
            for resource, amount in ps.requests.items():
                total[resource] = total.get(resource, 0) + amount * ps.count
        return total


def demand_of(
    wl: Workload, admission: Admission, *, flavors: Mapping[str, ResourceFlavor]
) -> Demand:
    """The pods `admission` starts for `wl`, as the binder would start them (the same podsets
    gang placement reads: flavors' node labels and tolerations merged in)."""
    gang = gang_of_admitted(
        wl, admission, flavors=flavors, priority=0, created_s=0.0, with_pods=False
    )
    return Demand(
        pod_sets=tuple(
            PodSetDemand(
                name=ps.name,
                count=ps.count,
                requests={**{r: v for r, v in ps.requests.items() if r != PODS}, PODS: ONE_POD},
                node_selector=ps.node_selector,
                node_affinity_terms=ps.node_affinity_terms,
                tolerations=ps.tolerations,
            )
            for ps in gang.pod_sets
        )
    )


# --- fit -----------------------------------------------------------------------------------


class Fit(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where the pods would go: `takes` per node; `placed` of the demand's pods fit."""

    takes: Takes
    placed: int
    wanted: int

    @property
    def complete(self) -> bool:
        return self.placed == self.wanted


def fit(demand: Demand, nodes: Sequence[NodeRoom]) -> Fit:
    """Put each podset's pods on the first nodes (in the given order) that take them.

    A node takes a pod when its labels match the pod's node selector and one of its affinity
    terms, every NoSchedule/NoExecute taint is tolerated, and its free room covers the pod's
    requests (a resource the node does not list counts as none free).
    """
    free = {n.name: dict(n.free) for n in nodes}
    takes: dict[str, dict[str, int]] = {}
    placed = 0
    for ps in demand.pod_sets:
        left = ps.count
        for node in nodes:
            if left == 0:
                break
            if not _eligible(ps, node):
                continue
            room = free[node.name]
            n = min(left, _how_many(ps.requests, room))
            if n == 0:
                continue
            row = takes.setdefault(node.name, {})
            for resource, amount in ps.requests.items():
                room[resource] = room.get(resource, 0) - amount * n
                row[resource] = row.get(resource, 0) + amount * n
            left -= n
        placed += ps.count - left
    return Fit(takes=takes, placed=placed, wanted=demand.pods)


def _eligible(ps: PodSetDemand, node: NodeRoom) -> bool:
    if any(node.labels.get(k) != v for k, v in ps.node_selector.items()):
        return False
    if ps.node_affinity_terms and not any(
        selector_matches(term, node.labels) for term in ps.node_affinity_terms
    ):
        return False
    return untolerated_taint(node.taints, ps.tolerations) is None


def _how_many(requests: Resources, room: Mapping[str, int]) -> int:
    """How many pods of `requests` fit in `room`; every pod requests at least `pods`."""
    return min(
        (max(0, room.get(r, 0)) // amount for r, amount in requests.items() if amount > 0),
        default=0,
    )


# --- the choice ----------------------------------------------------------------------------


class Candidate(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One cluster a workload may go to: its room (None: not known, taken as room enough, as
    in a simulation without nodes), or why it cannot take work now."""

    cluster: str
    capacity: ClusterCapacity | None = None
    unavailable: str = ""  # "lost", "no heartbeat yet", ...: the cluster is skipped


class Dispatched(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="Dispatched"):
    cluster: str
    takes: Takes  # the room it is expected to take, per node, until it is placed
    message: str


class NoClusterFits(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="NoClusterFits"):
    message: str  # per candidate, why not: "no worker cluster can run it now: a: lost; ..."


DispatchOutcome = Dispatched | NoClusterFits


def dispatch(
    demand: Demand, candidates: Sequence[Candidate], *, strategy: DispatchStrategy
) -> DispatchOutcome:
    """Choose the cluster for `demand` among `candidates` (in the MultiKueueConfig's order).

    first-fit: the first available candidate where the whole workload fits. best-fit: among
    those where it fits, the one left with the largest share of its dominant resource free
    (the resource the workload needs most of, relative to that cluster's allocatable); ties go
    to the earlier candidate. Clusters with unknown capacity fit, with a share of 0.
    """
    fitting: list[tuple[float, int, Candidate, Takes]] = []
    why: list[str] = []
    for index, candidate in enumerate(candidates):
        if candidate.unavailable:
            why.append(f"{candidate.cluster}: {candidate.unavailable}")
            continue
        if candidate.capacity is None:
            fitting.append((0.0, index, candidate, {}))
        else:
            found = fit(demand, candidate.capacity.nodes)
            if not found.complete:
                why.append(f"{candidate.cluster}: {_shortfall(found, candidate.capacity)}")
                continue
            share = free_share_after(demand, candidate.capacity)
            fitting.append((share, index, candidate, found.takes))
        if strategy == "first-fit":
            break
    if not fitting:
        listed = "; ".join(why) if why else "no clusters listed"
        return NoClusterFits(message=f"no worker cluster can run it now: {listed}")
    share, _, chosen, takes = max(fitting, key=lambda item: (item[0], -item[1]))
    if strategy == "first-fit":
        message = f"dispatched to cluster {chosen.cluster}: the first listed with room"
    else:
        message = (
            f"dispatched to cluster {chosen.cluster}: the most room left "
            f"({share:.0%} of its dominant resource free)"
        )
    if why:  # the clusters passed over, and why (those not tried after the choice: none)
        message += f"; not {'; not '.join(why)}"
    return Dispatched(cluster=chosen.cluster, takes=takes, message=message)


def _shortfall(found: Fit, capacity: ClusterCapacity) -> str:
    if not capacity.nodes:
        return "no schedulable nodes"
    return f"{found.placed} of {found.wanted} pods fit"


def free_share_after(demand: Demand, capacity: ClusterCapacity) -> float:
    """The share of the workload's dominant resource left free in `capacity` once it is placed.

    The dominant resource is the one the workload needs the largest share of the cluster's
    allocatable for (`pods` only when it requests nothing else).
    """
    total = demand.total()
    wanted = {r: v for r, v in total.items() if r != PODS and v > 0} or total
    allocatable: dict[str, int] = {}
    free: dict[str, int] = {}
    for node in capacity.nodes:
        for resource in wanted:
            allocatable[resource] = allocatable.get(resource, 0) + node.allocatable.get(resource, 0)
            free[resource] = free.get(resource, 0) + max(0, node.free.get(resource, 0))
    shares = [(wanted[r] / allocatable[r], r) for r in sorted(wanted) if allocatable.get(r, 0) > 0]
    if not shares:
        return 0.0
    _, dominant = max(shares)
    return (free[dominant] - wanted[dominant]) / allocatable[dominant]


# --- which checks dispatch, and to where ---------------------------------------------------


class Route(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a MultiKueue admission check may send workloads: its clusters, in order."""

    check: str
    clusters: tuple[str, ...]
    strategy: DispatchStrategy


def is_multikueue(check: AdmissionCheck | None) -> bool:
    return check is not None and check.controller_name == MULTIKUEUE_CONTROLLER


def route_of(
    check: AdmissionCheck, configs: Mapping[str, MultiKueueConfig]
) -> Route | NoClusterFits:
    """The clusters of a MultiKueue check, or why there are none (its config is missing)."""
    parameters = check.parameters
    name = parameters.name if parameters is not None else ""
    config = configs.get(name)
    if config is None:
        return NoClusterFits(
            message=f"AdmissionCheck {check.meta.name}: {MULTIKUEUE_CONFIG_KIND} "
            f"{name or '(none)'} not found"
        )
    return Route(check=check.meta.name, clusters=config.clusters, strategy=config.dispatch)

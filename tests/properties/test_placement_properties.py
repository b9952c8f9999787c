"""Laws of gang placement over random clusters, gangs and event streams.

Each example plays a stream of facts (pods bound, gangs finished, binds failed, nodes added and
removed, time passing) into a `GangScheduler`, acting on its decisions as the gangpermit service
would (bind what is permitted, evict victims, drop what timed out), and checks after every pass,
from the pods alone, that no node holds more than it has, that no gang holds part of itself, that
a CompositePodGroup tree is placed with its quorum or not at all (in one domain of its label),
and that a victim (a pod, a group, a tree) is evicted whole.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from muster.api.model import Taint, Toleration
from muster.core.placement.model import (
    NO_DEADLINE,
    ONE_POD,
    PODS,
    CompositeSpec,
    Decision,
    GangKey,
    GangPermitted,
    GangSpec,
    GangTimedOut,
    NodeInfo,
    NodeName,
    PlacementPreempted,
    PodInfo,
    PodKey,
    TopologyRequest,
)
from muster.core.placement.scheduler import GangScheduler

GI = 2**30 * 1000
TAINT = Taint(key="gpu", value="true")
TOLERATION = Toleration(key="gpu", operator="Exists")


class Cluster(msgspec.Struct, frozen=True):
    nodes: tuple[NodeInfo, ...]
    gangs: tuple[GangSpec, ...]
    pods: tuple[PodInfo, ...]  # pending, gang members and pods on their own
    ops: tuple[tuple[str, int], ...]
    scoring: str
    preemption: bool


@st.composite
def nodes(draw: st.DrawFn, name: str) -> NodeInfo:
    rack = draw(st.sampled_from(["r0", "r1", None]))
    return NodeInfo(
        name=NodeName(name),
        labels={} if rack is None else {"rack": rack},
        taints=(TAINT,) if draw(st.integers(0, 4)) == 0 else (),
        allocatable={
            "cpu": draw(st.sampled_from([1000, 2000, 4000])),
            "memory": draw(st.sampled_from([2, 4, 8])) * GI,
            PODS: draw(st.sampled_from([2, 3, 110])) * ONE_POD,
        },
        unschedulable=draw(st.integers(0, 9)) == 0,
        ready=draw(st.integers(0, 9)) != 0,
    )


@st.composite
def pods(draw: st.DrawFn, key: str, *, gang: GangKey | None, priority: int) -> PodInfo:
    return PodInfo(
        key=PodKey(key),
        gang=gang,
        priority=priority,
        created_s=draw(st.sampled_from([0.0, 1.0, 2.0])),
        requests={
            "cpu": draw(st.sampled_from([250, 500, 1000, 2000])),
            "memory": draw(st.sampled_from([GI // 4, GI])),
        },
        tolerations=(TOLERATION,) if draw(st.booleans()) else (),
    )


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    node_list = tuple(draw(nodes(f"n{i}")) for i in range(draw(st.integers(1, 5))))
    gangs: list[GangSpec] = []
    pod_list: list[PodInfo] = []
    # A CompositePodGroup tree over the first gangs (all at its priority), maybe evicted whole.
    tree_size = draw(st.integers(0, 3))
    tree = CompositeSpec(
        key=GangKey("ns/tree"),
        min_groups=draw(st.integers(1, max(tree_size, 1))),
        topology=draw(st.sampled_from([None, TopologyRequest(key="rack", required=True)])),
    )
    tree_all = draw(st.booleans())
    tree_priority = draw(st.integers(0, 2))
    for g in range(draw(st.integers(0, 4))):
        key = GangKey(f"ns/g{g}")
        in_tree = g < tree_size
        priority = tree_priority if in_tree else draw(st.integers(0, 2))
        topology = draw(st.sampled_from([None, True, False]))
        spec = GangSpec(
            key=key,
            min_count=draw(st.integers(1, 3)),
            priority=priority,
            created_s=float(g % 2),
            timeout_s=draw(st.sampled_from([None, 5.0, 20.0, NO_DEADLINE])),
            topology=None if topology is None else TopologyRequest(key="rack", required=topology),
            parents=(tree,) if in_tree else (),
        )
        gangs.append(spec)
        count = spec.min_count + draw(st.integers(0, 1))
        single = draw(st.booleans())  # disruption mode single: each pod is its own victim
        for i in range(count):
            pod = draw(pods(f"ns/g{g}-{i}", gang=key, priority=priority))
            if in_tree and tree_all:
                pod = msgspec.structs.replace(pod, workload=tree.key, tree_owner=True)
            elif single:
                pod = msgspec.structs.replace(pod, workload=pod.key)
            pod_list.append(pod)
    pod_list += [
        draw(pods(f"ns/solo{i}", gang=None, priority=draw(st.integers(0, 3))))
        for i in range(draw(st.integers(0, 4)))
    ]
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["bind", "finish", "fail", "add-node", "remove-node", "tick"]),
                st.integers(0, 7),
            ),
            max_size=12,
        )
    )
    return Cluster(
        nodes=node_list,
        gangs=tuple(gangs),
        pods=tuple(pod_list),
        ops=tuple(ops),
        scoring=draw(st.sampled_from(["binpack", "spread"])),
        preemption=draw(st.booleans()),
    )


class Player:
    """Feeds a cluster to a scheduler and acts on its decisions as the services would."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.s = GangScheduler(scoring=cluster.scoring, preemption=cluster.preemption)  # type: ignore[arg-type]
        self.nodes = {n.name: n for n in cluster.nodes}
        self.pods = {p.key: p for p in cluster.pods}
        self.specs = {g.key: g for g in cluster.gangs}
        self.now_s = 0.0
        self.extra_nodes = 0
        self.tree_held = False  # whether the tree's gangs held room after the last pass
        self.cut: set[GangKey] = set()  # gangs that lost single pods to a preemption

    def start(self) -> None:
        for n in self.cluster.nodes:
            self.s.upsert_node(n)
        for g in self.cluster.gangs:
            self.s.upsert_gang(g)
        for p in self.cluster.pods:
            self.s.upsert_pod(p)
        self.schedule()

    def schedule(self) -> None:
        decisions = self.s.schedule(now_s=self.now_s)
        self.check(decisions)
        for d in decisions:
            if isinstance(d, GangTimedOut):
                for key in d.pods:  # rejected: the pods fail
                    self.remove(key)
            elif isinstance(d, PlacementPreempted):
                for key in d.pods:
                    pod = self.pods.get(key)
                    if pod is not None and pod.gang is not None and self.owner(pod) == key:
                        self.cut.add(pod.gang)  # disruption mode single: a pod at a time
                    self.remove(key)

    def remove(self, key: PodKey) -> None:
        if self.pods.pop(key, None) is not None:
            self.s.remove_pod(key)

    def units(self) -> list[str]:
        """Gangs, then pods on their own, by key: what an op's number picks from."""
        return sorted(self.specs) + sorted(k for k, p in self.pods.items() if p.gang is None)

    def members(self, unit: str) -> list[PodKey]:
        return sorted(k for k, p in self.pods.items() if k == unit or p.gang == unit)

    def play(self, op: str, n: int) -> None:
        units = self.units()
        unit = units[n % len(units)] if units else None
        if op == "bind" and unit is not None:  # the binder binds a whole permit at once
            for key in self.members(unit):
                node = self.s.node_of(key)
                if node is not None and not self.pods[key].node:
                    self.pods[key] = msgspec.structs.replace(self.pods[key], node=node)
                    self.s.upsert_pod(self.pods[key])
        elif op == "finish" and unit is not None:
            for key in self.members(unit):
                self.remove(key)
        elif op == "fail" and unit is not None:
            self.s.bind_failed(GangKey(unit))
        elif op == "add-node":
            self.extra_nodes += 1
            name = NodeName(f"extra{self.extra_nodes}")
            labels = {"rack": f"r{n % 2}"}
            self.nodes[name] = NodeInfo(
                name=name, labels=labels, allocatable={"cpu": 4000, "memory": 8 * GI, PODS: 110_000}
            )
            self.s.upsert_node(self.nodes[name])
        elif op == "remove-node" and self.nodes:
            name = sorted(self.nodes)[n % len(self.nodes)]
            del self.nodes[name]
            self.s.remove_node(name)
        else:
            self.now_s += 6.0
        self.schedule()

    def check(self, decisions: list[Decision]) -> None:
        # 1. no node holds more than it has, `pods` included
        held: dict[NodeName, dict[str, int]] = {}
        for key, p in self.pods.items():
            node = self.s.node_of(key)
            if node is None:
                continue
            assert not p.node or p.node == node, f"{key} bound to {p.node}, recorded on {node}"
            use = held.setdefault(node, {})
            for resource, amount in {**p.requests, PODS: ONE_POD}.items():
                use[resource] = use.get(resource, 0) + amount
        for name, use in held.items():
            if name not in self.nodes:
                continue
            allocatable = self.nodes[name].allocatable
            for resource, amount in use.items():
                assert amount <= allocatable.get(resource, 0), f"{name} over-committed: {use}"
        # 2. a gang holds nothing or at least min_count
        holding: set[GangKey] = set()
        for gang, spec in self.specs.items():
            count = sum(1 for k in self.members(gang) if self.s.node_of(k) is not None)
            lawful = count == 0 or count >= spec.min_count or gang in self.cut
            assert lawful, f"{gang} holds {count} of {spec}"
            if count and spec.parents:
                holding.add(gang)
        # 3. a tree that held nothing holds nothing or its quorum, in one domain of its label
        tree = next((spec.parents[0] for spec in self.specs.values() if spec.parents), None)
        if tree is not None and not self.tree_held:
            assert not holding or len(holding) >= tree.min_groups, f"tree holds {holding}"
        self.tree_held = bool(holding)
        if tree is not None and tree.topology is not None:
            racks = {
                self.nodes[node].labels.get("rack")
                for key in holding
                for k in self.members(key)
                if (node := self.s.node_of(k)) is not None and node in self.nodes
            }
            assert len(racks) <= 1, f"tree spans racks {racks}"
        # 4. a permit names pods that now hold room, each once
        for d in decisions:
            if isinstance(d, GangPermitted):
                keys = [b.pod for b in d.bindings]
                assert len(set(keys)) == len(keys)
                assert all(self.s.node_of(b.pod) == b.node for b in d.bindings)
        # 5. a victim goes whole: every pod of it (a group or tree in mode all) is evicted
        for d in decisions:
            if isinstance(d, PlacementPreempted):
                for victim in d.victims:
                    whole = {k for k, p in self.pods.items() if self.owner(p) == victim}
                    assert whole <= set(d.pods), f"{victim} partly evicted: {d.pods}"

    def owner(self, pod: PodInfo) -> str:
        if pod.workload:
            return pod.workload
        if pod.gang is not None:
            return self.specs[pod.gang].workload or pod.gang
        return pod.key


@given(clusters())
def test_no_node_over_committed_and_no_gang_holds_part_of_itself(cluster: Cluster) -> None:
    player = Player(cluster)
    player.start()
    for op, n in cluster.ops:
        player.play(op, n)


def _facts(cluster: Cluster) -> list[NodeInfo | GangSpec | PodInfo]:
    return [*cluster.nodes, *cluster.gangs, *cluster.pods]


def _feed(cluster: Cluster, facts: Iterable[NodeInfo | GangSpec | PodInfo]) -> list[Decision]:
    s = GangScheduler(scoring=cluster.scoring, preemption=cluster.preemption)  # type: ignore[arg-type]
    for fact in facts:
        if isinstance(fact, NodeInfo):
            s.upsert_node(fact)
        elif isinstance(fact, GangSpec):
            s.upsert_gang(fact)
        else:
            s.upsert_pod(fact)
    return s.schedule(now_s=0)


@given(clusters(), st.randoms(use_true_random=False))
def test_the_same_facts_in_any_order_give_the_same_decisions(
    cluster: Cluster, rnd: random.Random
) -> None:
    facts = _facts(cluster)
    shuffled = list(facts)
    rnd.shuffle(shuffled)

    assert _feed(cluster, facts) == _feed(cluster, shuffled)

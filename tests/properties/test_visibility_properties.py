"""Visibility kept as records change equals visibility computed afresh, whatever happened.

Random clusters and workloads go through arrivals, rounds, finishes, deletions, evictions,
deactivations, forgetting and configuration changes (queues removed and applied again). After
every call the engine's `QueueIndex` equals one counted afresh from its records; at random
points (and at the end) an incremental `VisibilityRenderer`'s values, written through a
`VisibilityWriter` told only the keys it changed, equal a new renderer's, and the gateway
answers every page of every pending list from them as the engine orders it: a ClusterQueue's,
and each LocalQueue's from the pages holding its workloads only. Pages are small here (2 to 4
workloads), so lists span many, and split and merge often.
"""

from __future__ import annotations

import asyncio

from engine_scenarios import (
    Arrival,
    Scenario,
    cluster_queue,
    flavors,
    local_queue,
    scenarios,
    workload,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_kv import MemoryKV

from muster.admission.shards import PartitionMap, Sharding
from muster.admission.visibility import VisibilityRenderer
from muster.admission.visibility_writer import VisibilityWriter
from muster.api.model import ApiObject, ClusterQueue, KueueConfig, LocalQueue, WorkloadKey
from muster.contracts.v1 import services_pb2
from muster.core.engine import Engine
from muster.core.queue_index import QueueIndex
from muster.core.queues import Park
from muster.core.quota import QuotaNode
from muster.core.records import Phase, WorkloadRecord
from muster.gateway.visibility import pending_workloads
from muster.metrics.kueue_gauges import queue_gauges

PAGE_BOUNDS = (2, 4)  # pending workloads per page, at least and at most: small, so lists span pages
CALLS = (
    "submit", "schedule", "finish", "delete", "deactivate", "activate", "evict", "stopped",
    "forget", "remove-queue", "apply-queue", "render",
)  # fmt: skip


def tallies(index: QueueIndex, *, swept: bool = False) -> dict[str, object]:
    """What the index counts, without the queues it counts nothing for; `swept`: after the
    index swept them, it keeps none (a queue removed for good leaves nothing behind)."""
    found: dict[str, object] = {}
    for kind, queues in (("cq", index.cluster_queues), ("lq", index.local_queues)):
        for name, t in queues.items():
            counted = (t.pending, t.backoff, t.reserving, t.admitted, t.reserved, t.used)
            assert not swept or counted != (0, 0, 0, 0, {}, {}), f"empty tally of {kind} {name!r}"
            if counted != (0, 0, 0, 0, {}, {}):
                found[f"{kind}/{name}"] = counted
    for name, waiting in index.waiting.items():
        assert not swept or waiting, f"an empty waiting list of {name!r} is kept"
        if waiting:
            found[f"waiting/{name}"] = [r.key for r in waiting]
    for kind, groups in (("cq", index.cluster_queue_groups), ("lq", index.local_queue_groups)):
        for name, counts in groups.items():
            assert not swept or counts, f"an empty group count of {kind} {name!r} is kept"
            if counts:
                found[f"groups/{kind}/{name}"] = {id(g): n for g, n in counts.items()}
    return found


def below(node: QuotaNode, cohort: QuotaNode) -> bool:
    while node.parent is not None:
        node = node.parent
        if node is cohort:
            return True
    return False


COUNTED = ("pending_workloads", "reserving_active_workloads", "admitted_active_workloads")


def gauges_afresh(engine: Engine) -> dict[str, dict[tuple[str, ...], float]]:
    """The workload-count gauges of every queue and cohort, from a walk over every record."""
    out: dict[str, dict[tuple[str, ...], float]] = {}
    config = engine.config
    by_cq: dict[str, list[WorkloadRecord]] = {}
    by_lq: dict[str, list[WorkloadRecord]] = {}
    for r in engine.records.values():
        by_cq.setdefault(r.cluster_queue, []).append(r)
        by_lq.setdefault(r.local_queue, []).append(r)

    def put(
        prefix: str, labels: tuple[str, ...], records: list[WorkloadRecord], active: bool
    ) -> None:
        counts = {"active": 0, "inadmissible": 0, "reserving": 0, "admitted": 0}
        for r in records:
            if r.phase is Phase.PENDING:
                parked = r.group is not None and r.group.park is Park.PARKED
                counts["inadmissible" if parked or not active else "active"] += 1
            counts["inadmissible"] += r.phase is Phase.BACKOFF
            counts["reserving"] += r.holds_quota
            counts["admitted"] += r.phase is Phase.ADMITTED
        for status in ("active", "inadmissible"):
            out.setdefault(f"{prefix}pending_workloads", {})[(*labels, status)] = counts[status]
        for what in ("reserving", "admitted"):
            series = f"{prefix}{what}_active_workloads"
            out.setdefault(series, {})[labels] = counts[what]

    for name in engine.cluster_queue_names():
        put("kueue_", (name,), by_cq.get(name, []), name not in config.inactive)
    for namespace, name in engine.local_queue_keys():
        cq = config.local_queues[f"{namespace}/{name}"].cluster_queue
        active = cq in config.cluster_queues and cq not in config.inactive
        put("kueue_local_queue_", (name, namespace), by_lq.get(f"{namespace}/{name}", []), active)
    for cohort in config.tree.cohorts.values():
        members = [n for n, node in config.tree.cluster_queues.items() if below(node, cohort)]
        admitted = sum(1 for m in members for r in by_cq.get(m, []) if r.phase is Phase.ADMITTED)
        out.setdefault("kueue_cohort_subtree_admitted_active_workloads", {})[(cohort.name,)] = (
            admitted
        )
    return out


class Driver:
    """Plays drawn calls on an engine, checking the kept views after each."""

    def __init__(self, scn: Scenario, shards: int) -> None:
        self.engine = Engine(scn.objects, config=scn.config, hold_quota_until_stopped=True)
        self.engine.state.index.page_bounds = PAGE_BOUNDS
        self.sharding = Sharding(self.engine, shard=0, partitions=PartitionMap(shards=shards))
        self.arrivals = [a.workload for a in scn.arrivals]
        self.queues: list[LocalQueue | ClusterQueue] = [
            o for o in scn.objects if isinstance(o, LocalQueue | ClusterQueue)
        ]
        self.removed: list[LocalQueue | ClusterQueue] = []
        self.now_s = 0.0
        self.renderer = VisibilityRenderer()
        self.kv = MemoryKV()
        self.writer = VisibilityWriter(self.kv, self.renderer)
        self.loop = asyncio.new_event_loop()

    def keys(self, *phases: Phase) -> list[WorkloadKey]:
        return sorted(k for k, r in self.engine.records.items() if not phases or r.phase in phases)

    def call(self, name: str, pick: int) -> None:
        e, self.now_s = self.engine, self.now_s + 1
        now = self.now_s
        holders = self.keys(Phase.RESERVED, Phase.ADMITTED)
        known = self.keys()
        if name == "submit" and self.arrivals:
            e.submit(self.arrivals.pop(0), now_s=now)
        elif name == "schedule":
            e.schedule(now_s=now)
        elif name == "finish" and holders:
            e.finish(holders[pick % len(holders)], now_s=now)
        elif name == "delete" and known:
            e.delete(known[pick % len(known)], now_s=now)
        elif name in ("deactivate", "activate") and known:
            e.set_active(known[pick % len(known)], name == "activate", now_s=now)
        elif name == "evict" and holders:
            e.evict(holders[pick % len(holders)], reason="Test", message="evicted", now_s=now)
        elif name == "stopped" and (evicting := self.keys(Phase.EVICTING)):
            e.stopped(evicting[pick % len(evicting)], now_s=now)
        elif name == "forget" and (done := self.keys(Phase.FINISHED, Phase.DELETED)):
            e.forget(done[pick % len(done)])
        elif name == "remove-queue" and self.queues:
            obj = self.queues.pop(pick % len(self.queues))
            self.removed.append(obj)
            namespace = obj.meta.namespace if isinstance(obj, LocalQueue) else ""
            e.remove(type(obj).__name__, obj.meta.name, namespace=namespace or "", now_s=now)
        elif name == "apply-queue" and self.removed:
            obj = self.removed.pop(pick % len(self.removed))
            self.queues.append(obj)
            e.apply(obj, now_s=now)
        elif name == "render":
            self.render_and_compare()
        assert tallies(e.state.index) == tallies(QueueIndex.of(e.records.values()))

    def render_and_compare(self) -> None:
        gauges = queue_gauges(self.engine, owns_tree=lambda _tree: True)
        kept = {s: v for s, v in gauges.items() if s.endswith(COUNTED)}
        assert kept == gauges_afresh(self.engine)
        values, changed = self.renderer.render(self.engine, self.sharding)
        tallies(self.engine.state.index, swept=True)
        self.loop.run_until_complete(self.writer.write(values, changed))
        fresh, _ = VisibilityRenderer().render(self.engine, self.sharding)
        assert self.kv.data == fresh
        for name in self.engine.cluster_queue_names():
            if f"cq.{name}" in fresh:
                self.compare_pages(name)

    def compare_pages(self, cluster_queue: str) -> None:
        """The gateway's answers, every page of every size, against the engine's order: the
        ClusterQueue's, and each of its LocalQueues' (reading only pages holding its own)."""
        order = [
            (p.key, p.position_in_cluster_queue, p.position_in_local_queue, p.local_queue)
            for p in self.engine.pending_workloads(cluster_queue)
        ]
        local_queues = sorted(
            key.split("/", 1)
            for key, lq in self.engine.config.local_queues.items()
            if lq.cluster_queue == cluster_queue
        )
        queries: list[tuple[services_pb2.PendingWorkloadsRequest, list[tuple[str, int, int]]]] = []
        for offset in range(len(order) + 2):
            for limit in (1, 3, 9):
                request = services_pb2.PendingWorkloadsRequest(
                    cluster_queue=cluster_queue, offset=offset, limit=limit
                )
                queries.append((request, [o[:3] for o in order]))
                for namespace, name in local_queues:
                    request = services_pb2.PendingWorkloadsRequest(
                        namespace=namespace, local_queue=name, offset=offset, limit=limit
                    )
                    queries.append((request, [o[:3] for o in order if o[3] == name]))
        for request, expected in queries:
            self.kv.read.clear()
            reply = self.loop.run_until_complete(pending_workloads(self.kv, request))
            assert reply.total == len(expected)
            got = [
                (f"{p.namespace}/{p.name}", p.position_in_cluster_queue, p.position_in_local_queue)
                for p in reply.items
            ]
            assert got == expected[request.offset : request.offset + request.limit]
            names = {(p.namespace, p.name) for p in reply.items}
            for key in self.kv.read:
                if key.startswith("pending-page."):  # read only when it holds an answer
                    page = services_pb2.PendingWorkloadsResponse.FromString(self.kv.data[key])
                    assert names & {(p.namespace, p.name) for p in page.items}, key


@settings(max_examples=60, deadline=None)
@given(
    scenarios(max_workloads=10),
    st.lists(st.tuples(st.sampled_from(CALLS), st.integers(0, 50)), max_size=60),
    st.sampled_from((1, 2)),
)
def test_kept_views_equal_views_computed_afresh(
    scn: Scenario, calls: list[tuple[str, int]], shards: int
) -> None:
    driver = Driver(scn, shards)
    for name, pick in calls:
        driver.call(name, pick)
    driver.render_and_compare()
    driver.loop.close()


def test_a_render_after_one_arrival_writes_one_page_and_the_index() -> None:
    """One arrival at the head of a queue of many pages: its status, its LocalQueue's, the
    first page and the index; the pages after it keep their keys and are not written."""
    scn = next_scenario()
    driver = Driver(scn, shards=1)
    for _ in range(len(driver.arrivals)):
        driver.call("submit", 0)
    driver.render_and_compare()
    assert len(driver.engine.pending_pages("cq")) == 3
    first = driver.engine.pending_pages("cq")[0].id
    driver.engine.submit(workload("urgent", queue="lq-cq", cpu=1000, priority=9), now_s=99)
    values, changed = driver.renderer.render(driver.engine, driver.sharding)
    assert changed == {"cq.cq", "lq.ns.lq-cq", f"pending-page.1-{first}.cq", "pending-index.cq"}
    driver.loop.run_until_complete(driver.writer.write(values, changed))
    driver.render_and_compare()


def next_scenario() -> Scenario:
    """One ClusterQueue without quota and seven workloads of one priority waiting in it."""
    objects: list[ApiObject] = [*flavors(), cluster_queue("cq", cpu=0), local_queue("cq")]
    arrivals = tuple(
        Arrival(workload(f"w{i}", queue="lq-cq", cpu=1000), at_s=i, runs_s=1) for i in range(7)
    )
    return Scenario(objects=tuple(objects), config=KueueConfig(), arrivals=arrivals)

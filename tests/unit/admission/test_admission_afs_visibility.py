"""Pending positions of a ClusterQueue ordered by admission fair sharing follow the order
admission takes them in: the LocalQueue with the least usage first, then priority and FIFO
(equal usages interleave by priority), as Kueue's visibility snapshot sorts with its heap's
ordering function. Checked where a user reads them: admission's own answer and the gateway's,
read from the bucket admission writes."""

from __future__ import annotations

from typing import Any

import admission_stream as kit
from memory_kv import MemoryKV

from muster.admission.state import AdmissionState
from muster.admission.visibility import VisibilityRenderer, pending_workloads, visibility_values
from muster.admission.visibility_writer import VisibilityWriter
from muster.api.model import AdmissionFairSharingConfig, KueueConfig
from muster.contracts.v1 import services_pb2
from muster.gateway.visibility import pending_workloads as gateway_pending

FAIR = KueueConfig(admission_fair_sharing=AdmissionFairSharingConfig(usage_half_life_s=600.0))


def shared_queue(*, fair: bool) -> dict[str, Any]:
    cq = kit.cluster_queue(cpu="2")
    if fair:
        cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return cq


def busy(*, fair: bool = True, stream: kit.Stream | None = None) -> AdmissionState:
    """Team a runs a1 on the whole queue, then waits with a2 and a3 (priority 10); teams b
    (b1, priority 0) and c (c1, priority 5) have used nothing."""
    stream = stream or kit.Stream()
    state = AdmissionState(kueue=FAIR)
    state.take_ownership(now_s=0.0)
    manifests = (kit.flavor(), shared_queue(fair=fair), *map(kit.local_queue, "abc"))
    for manifest in manifests:
        stream.run(state, kit.applied(manifest))
    for at_s, (name, queue, priority) in enumerate(
        [("a1", "a", 0), ("a2", "a", 10), ("a3", "a", 10), ("b1", "b", 0), ("c1", "c", 5)], 1
    ):
        wl = kit.workload(name, cpu="2", queue=queue, priority=priority)
        stream.run(state, kit.submitted(wl, at_s=at_s), now_s=at_s)
    return state


# (name, position in the ClusterQueue, position in its LocalQueue)
FAIR_ORDER = [("c1", 0, 0), ("b1", 1, 0), ("a2", 2, 0), ("a3", 3, 1)]


def test_admission_lists_the_least_used_local_queues_workloads_first() -> None:
    response = pending_workloads(busy().engine, "cq")
    assert [
        (w.name, w.position_in_cluster_queue, w.position_in_local_queue) for w in response.items
    ] == FAIR_ORDER


async def gateway(state: AdmissionState, **query: Any) -> list[tuple[str, int, int]]:
    kv = MemoryKV()
    await VisibilityWriter(kv).write(visibility_values(state.engine, state.sharding))
    request = services_pb2.PendingWorkloadsRequest(**query)
    found = await gateway_pending(kv, request)
    return [(w.name, w.position_in_cluster_queue, w.position_in_local_queue) for w in found.items]


async def test_the_gateway_gives_the_positions_admission_takes_them_in() -> None:
    state = busy()
    assert await gateway(state, cluster_queue="cq") == FAIR_ORDER
    assert await gateway(state, cluster_queue="cq", offset=1, limit=2) == FAIR_ORDER[1:3]
    assert await gateway(state, local_queue="a", namespace="ns") == FAIR_ORDER[2:]


async def test_without_an_admission_scope_positions_stay_by_priority_then_fifo() -> None:
    state = busy(fair=False)
    by_priority = [("a2", 0, 0), ("a3", 1, 1), ("c1", 2, 0), ("b1", 3, 0)]
    assert await gateway(state, cluster_queue="cq") == by_priority
    response = pending_workloads(state.engine, "cq")
    assert [
        (w.name, w.position_in_cluster_queue, w.position_in_local_queue) for w in response.items
    ] == by_priority


def test_a_kept_render_follows_the_usage_a_start_changes() -> None:
    stream, views = kit.Stream(), VisibilityRenderer()
    state = busy(stream=stream)
    views.render(state.engine, state.sharding)
    # a1 ends; c1 starts on its quota and its entry penalty puts team c behind team b.
    finished = kit.reported("finished", "ns/a1", at_s=10.0)
    assert [e.workload for e in stream.run(state, finished, now_s=10.0)][-1:] == ["ns/c1"]
    kept, _ = views.render(state.engine, state.sharding)
    assert kept == visibility_values(state.engine, state.sharding)
    response = pending_workloads(state.engine, "cq")
    assert [w.name for w in response.items] == ["b1", "a2", "a3"]

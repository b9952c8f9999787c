"""What `muster bench chaos --routing` broke, as deterministic cases on a real nats-server.

Routing within a cohort: ClusterQueues a1 and a2 share cohort `alpha` (one tree, one ready
heap of queues in admission). A workload waiting in a1 that `fastest` moves to a2 lists a2
under its own sort key while a1's entry under that same key is still in the heap; the two
queues' tokens were equal (each queue counts its own listings), so the heap compared the queues
themselves and the admission replica died with a TypeError on every round that read the move
(seed 1, 40 workloads, --checks --routing --big-pods 5: admission-0 exited). And a workload
routed back into a queue that had held it waited there for good (below).
"""

from __future__ import annotations

from typing import Any

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    fact,
    flavor,
    local_queue,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)

FASTEST = {"muster.dev/routing-policy": "fastest"}


def no_borrowing(cq: dict[str, Any]) -> dict[str, Any]:
    """`cq` lending its quota but never borrowing: full, its workloads wait (or move)."""
    (group,) = cq["spec"]["resourceGroups"]
    for fl in group["flavors"]:
        for resource in fl["resources"]:
            resource["borrowingLimit"] = 0
    return cq


def alpha(a1: dict[str, Any], a2: dict[str, Any]) -> list[pb.Envelope]:
    """The flavor, ClusterQueues a1 and a2 (of one cohort) and their LocalQueues lq-a1, lq-a2."""
    queues = [local_queue("lq-a1", cq="a1"), local_queue("lq-a2", cq="a2")]
    return [config_applied(m) for m in (flavor(), a1, a2, *queues)]


async def test_a_workload_fastest_moves_to_its_cohorts_other_queue_is_reserved_there(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    a1 = no_borrowing(cluster_queue("a1", cpu="1", cohort="alpha", annotations=FASTEST))
    a2 = cluster_queue("a2", cpu="4", cohort="alpha", annotations=FASTEST)
    run_s = {"muster.dev/run-seconds": "600"}
    moving = {**run_s, "muster.dev/alternatives": '[{"queueName": "lq-a2"}]'}
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await publish(
            bus,
            *alpha(a1, a2),
            submitted(workload("filler", queue="lq-a1", annotations=run_s)),
            submitted(workload("other", queue="lq-a2", annotations=run_s)),
        )
        await events.wait_for("admitted", workload="ns/filler")
        await events.wait_for("admitted", workload="ns/other")
        await publish(bus, submitted(workload("w", queue="lq-a1", annotations=moving)))

        routed = await events.wait_for("routed", workload="ns/w", timeout_s=20)
        admitted = await events.wait_for("admitted", workload="ns/w", timeout_s=20)
        assert routed.routed.to_cluster_queue == "a2"
        assert admitted.admitted.admission.cluster_queue == "a2"
        assert not admission.task.done()  # the replica lives on
    finally:
        await admission.stop()


async def test_a_workload_routed_back_into_a_queue_that_held_it_is_tried_there(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    """Seed 1, 2 shards, 60 workloads, --routing: w-00053 went a2 -> a1 (held there behind a1's
    own waiting workload) -> a2 -> a1, and was never decided again. Its routed group in a1 stayed
    parked once empty: the hold was released while w was away (an empty held group was dropped,
    not woken), and an arrival into an empty parked group is not listed."""
    a1 = no_borrowing(cluster_queue("a1", cpu="1", cohort="alpha", annotations=FASTEST))
    a2 = no_borrowing(cluster_queue("a2", cpu="1", cohort="alpha", annotations=FASTEST))

    def job(name: str, queue: str, run_s: int, **more: str) -> dict[str, Any]:
        return workload(
            name, queue=queue, annotations={"muster.dev/run-seconds": str(run_s), **more}
        )

    async def applied() -> None:
        """Every event published so far was handled (one consumer reads them in order)."""
        sentinel = f"sentinel-{len(events.seen)}"
        await publish(bus, submitted(workload(sentinel, queue="nowhere")))
        await events.wait_for("pending", workload=f"ns/{sentinel}")

    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await publish(
            bus,
            *alpha(a1, a2),
            submitted(job("f1", "lq-a1", 1000)),
            submitted(job("f2", "lq-a2", 5000)),
        )
        await events.wait_for("admitted", workload="ns/f2")
        await events.wait_for("admitted", workload="ns/f1")
        await publish(bus, submitted(job("n1", "lq-a1", 10)), submitted(job("n2", "lq-a2", 100)))
        await applied()
        # w (declared a2) moves to a1, where it is held behind n1, a1's own.
        await publish(
            bus,
            submitted(
                job("w", "lq-a2", 10, **{"muster.dev/alternatives": '[{"queueName": "lq-a1"}]'})
            ),
        )
        await events.wait_for("routed", workload="ns/w")
        await applied()
        # f2 leaves: n2 starts in a2, and w, sooner done behind it, moves back to a2. (n2's
        # 100 s keep a2 the slower once a1 is empty, however long the steps take.)
        await publish(bus, fact("deleted", "ns/f2"))
        await events.wait_for("admitted", workload="ns/n2")
        await applied()
        # n1 leaves: a1's hold ends while w is away.
        await publish(bus, fact("deleted", "ns/n1"))
        await applied()
        # f1 leaves: a1 is empty, and w moves to it once more.
        await publish(bus, fact("deleted", "ns/f1"))

        await applied()
        admitted = await events.wait_for("admitted", workload="ns/w", timeout_s=20)
        moves = [
            (e.routed.from_cluster_queue, e.routed.to_cluster_queue)
            for e in events.matching("routed", workload="ns/w")
        ]
        assert moves == [("a2", "a1"), ("a1", "a2"), ("a2", "a1")]
        assert admitted.admitted.admission.cluster_queue == "a1"
    finally:
        await admission.stop()

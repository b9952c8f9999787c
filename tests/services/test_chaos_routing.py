"""What `muster bench chaos --routing` broke, as deterministic cases on a real nats-server.

Routing within a cohort: ClusterQueues a1 and a2 share cohort `alpha` (one tree, one ready
heap of queues in admission). A workload waiting in a1 that `fastest` moves to a2 lists a2
under its own sort key while a1's entry under that same key is still in the heap; the two
queues' tokens were equal (each queue counts its own listings), so the heap compared the queues
themselves and the admission replica died with a TypeError on every round that read the move
(seed 1, 40 workloads, --checks --routing --big-pods 5: admission-0 exited).
"""

from __future__ import annotations

from typing import Any

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    flavor,
    local_queue,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)

FASTEST = {"muster.dev/routing-policy": "fastest"}


def no_borrowing(cq: dict[str, Any]) -> dict[str, Any]:
    """`cq` lending its quota but never borrowing: full, its workloads wait (or move)."""
    (group,) = cq["spec"]["resourceGroups"]
    for fl in group["flavors"]:
        for resource in fl["resources"]:
            resource["borrowingLimit"] = 0
    return cq


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
            config_applied(flavor()),
            config_applied(a1),
            config_applied(a2),
            config_applied(local_queue("lq-a1", cq="a1")),
            config_applied(local_queue("lq-a2", cq="a2")),
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

"""Sharding: one lease per shard index, and cohort trees split between replicas."""

from __future__ import annotations

import asyncio

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    count,
    drained,
    flavor,
    local_queue,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.admission.shards import shard_of
from muster.bus import Bus, BusConfig
from muster.core.routing import Policy

pytestmark = pytest.mark.timeout(30)


async def test_second_replica_of_a_shard_waits_for_the_lease_and_takes_over(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    first = await start_admission(bus_config)
    await first.wait_serving()
    second = await start_admission(bus_config)
    try:
        await publish(
            bus,
            config_applied(flavor()),
            config_applied(cluster_queue(cpu="4")),
            config_applied(local_queue()),
            submitted(workload("a", cpu="1")),
        )
        await events.wait_for("admitted", workload="ns/a")
        await drained(bus, "admission-0")
        assert not second.health.serving  # still waiting for the lease
        assert count(events, "admitted", "ns/a") == 1

        await first.kill()
        await second.wait_serving()
        await publish(bus, submitted(workload("b", cpu="1")))
        await events.wait_for("admitted", workload="ns/b")
        await drained(bus, "admission-0")
        assert count(events, "admitted", "ns/a") == 1
        assert count(events, "admitted", "ns/b") == 1
    finally:
        await second.stop()
        await first.stop()


async def test_two_shards_decide_their_own_cohort_trees(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # crc32("cohort/alpha") % 2 == 1, crc32("cohort/beta") % 2 == 0
    assert shard_of("cohort/alpha", shards=2) == 1
    assert shard_of("cohort/beta", shards=2) == 0
    replicas = [await start_admission(bus_config, shard=i, shards=2) for i in (0, 1)]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await publish(
            bus,
            config_applied(flavor()),
            config_applied(cluster_queue("cq-alpha", cohort="alpha")),
            config_applied(cluster_queue("cq-beta", cohort="beta")),
            config_applied(local_queue("lq-alpha", cq="cq-alpha")),
            config_applied(local_queue("lq-beta", cq="cq-beta")),
            submitted(workload("in-alpha", queue="lq-alpha")),
            submitted(workload("in-beta", queue="lq-beta")),
            submitted(workload("nowhere", queue="lq-missing")),
        )
        alpha = await events.wait_for("admitted", workload="ns/in-alpha")
        beta = await events.wait_for("admitted", workload="ns/in-beta")
        missing = await events.wait_for("pending", workload="ns/nowhere")
        assert alpha.source == "admission/1"
        assert beta.source == "admission/0"
        expected = shard_of("queue:ns/lq-missing", shards=2)
        assert missing.source == f"admission/{expected}"
        assert missing.pending.message == "LocalQueue lq-missing doesn't exist"
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)
        for key in ("ns/in-alpha", "ns/in-beta"):
            assert count(events, "admitted", key) == 1
        assert count(events, "pending", "ns/nowhere") == 1

        # The missing LocalQueue appears, in tree alpha: shard 1 adopts the workload.
        await publish(bus, config_applied(local_queue("lq-missing", cq="cq-alpha")))
        moved = await events.wait_for("admitted", workload="ns/nowhere")
        assert moved.source == "admission/1"
    finally:
        for r in replicas:
            await r.stop()


async def test_a_shard_routes_only_to_alternatives_in_its_own_trees_and_says_so(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # crc32 puts the trees of ClusterQueues gpu and cpu in shard 0 of 2, l40's in shard 1.
    assert [shard_of(f"cq/{name}", shards=2) for name in ("gpu", "cpu", "l40")] == [0, 0, 1]
    replicas = [
        await start_admission(bus_config, shard=i, shards=2, routing_policy=Policy.FASTEST)
        for i in (0, 1)
    ]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await publish(
            bus,
            config_applied(flavor()),
            *(config_applied(cluster_queue(n, cpu="8", gpu="1")) for n in ("gpu", "l40")),
            config_applied(cluster_queue("cpu", cpu="8")),
            *(config_applied(local_queue(n, cq=n)) for n in ("gpu", "l40", "cpu")),
            *(submitted(workload(f"g{i}", gpu=1, queue="gpu", annotations=RUNS)) for i in range(3)),
        )
        await events.wait_for("pending", workload="ns/g2")
        alternatives = "[{queueName: l40}, {queueName: cpu, requests: {nvidia.com/gpu: 0}}]"
        light = {**RUNS, "muster.dev/alternatives": alternatives}
        await publish(bus, submitted(workload("light", gpu=1, queue="gpu", annotations=light)))

        routed = await events.wait_for("routed", workload="ns/light")
        assert routed.source == "admission/0"
        assert routed.routed.to_cluster_queue == "cpu"  # l40 is as fast, but shard 1's
        assert routed.routed.message.endswith(
            "; not considered: LocalQueue l40 (cohort tree cq/l40 is decided by admission shard 1)"
        )
        admitted = await events.wait_for("admitted", workload="ns/light")
        assert (admitted.source, admitted.admitted.admission.cluster_queue) == (
            "admission/0",
            "cpu",
        )
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)
        assert [e.source for e in events.seen if e.workload == "ns/light"][1:] == [
            "admission/0"
        ] * 2  # routed, admitted (with its reservation): from shard 0 only
    finally:
        for r in replicas:
            await r.stop()


RUNS = {"muster.dev/run-seconds": "30"}

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

from muster.admission.shards import shard_of
from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(30)


async def test_second_replica_of_a_shard_waits_for_the_lease_and_takes_over(
    bus: Bus, bus_config: BusConfig, events
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
        assert count(events, "quota_reserved", "ns/a") == 1

        await first.kill()
        await second.wait_serving()
        await publish(bus, submitted(workload("b", cpu="1")))
        await events.wait_for("admitted", workload="ns/b")
        await drained(bus, "admission-0")
        assert count(events, "quota_reserved", "ns/a") == 1
        assert count(events, "quota_reserved", "ns/b") == 1
    finally:
        await second.stop()
        await first.stop()


async def test_two_shards_decide_their_own_cohort_trees(
    bus: Bus, bus_config: BusConfig, events
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
            assert count(events, "quota_reserved", key) == 1
        assert count(events, "pending", "ns/nowhere") == 1

        # The missing LocalQueue appears, in tree alpha: shard 1 adopts the workload.
        await publish(bus, config_applied(local_queue("lq-missing", cq="cq-alpha")))
        moved = await events.wait_for("admitted", workload="ns/nowhere")
        assert moved.source == "admission/1"
    finally:
        for r in replicas:
            await r.stop()
